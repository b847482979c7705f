"""Where the committed test archives live, for tests, benches and scripts alike (none of which
imports from tests/)."""

from __future__ import annotations

import pathlib
import zipfile

REPO = pathlib.Path(__file__).resolve().parent.parent
FIXTURES = REPO / "tests" / "fixtures"
ARCHIVES = FIXTURES / "archives"
# torch's own answers for the committed archives (written by testing/fixtures/make_fixtures.py)
EXPECTED_JSON = FIXTURES / "expected.json"
# the ExecuTorch-exported model shared by the projects beside this one (the `shared_linear` fixture)
SHARED_LINEAR = REPO.parent / "shared" / "fixtures" / "linear.pt2"  # shared/ beside the clone
# torch.save containers written by each torch version (testing/fixtures/make_containers.py)
CONTAINERS = FIXTURES / "containers"
CONTAINER_VERSIONS = sorted(path.parent.name for path in CONTAINERS.glob("torch-*/expected.json"))
# every committed archive and container that is a ZIP (a .pt2 or a torch.save .pt)
ZIP_FIXTURES = sorted(
    path for path in FIXTURES.rglob("*") if path.suffix in (".pt2", ".pt") and zipfile.is_zipfile(path)
)
