#!/bin/sh
# One-shot S3 setup for docker-compose.yml (runs in the amazon/aws-cli image): wait for the
# SeaweedFS S3 gateway, create the bucket, upload the archive. Idempotent.
# Environment: S3_ENDPOINT, S3_BUCKET, S3_KEY, ARCHIVE (a file path), AWS_* credentials.
set -eu
: "${S3_ENDPOINT:?}" "${S3_BUCKET:?}" "${S3_KEY:?}" "${ARCHIVE:?}"
aws() { command aws --endpoint-url "$S3_ENDPOINT" "$@"; }

tries=0
until aws s3api list-buckets >/dev/null 2>&1; do
    tries=$((tries + 1))
    if [ "$tries" -ge 60 ]; then
        echo "init-s3: $S3_ENDPOINT did not answer within 60 s" >&2
        exit 1
    fi
    sleep 1
done
aws s3api head-bucket --bucket "$S3_BUCKET" >/dev/null 2>&1 || aws s3api create-bucket --bucket "$S3_BUCKET"
aws s3 cp "$ARCHIVE" "s3://$S3_BUCKET/$S3_KEY"
echo "init-s3: uploaded $ARCHIVE to s3://$S3_BUCKET/$S3_KEY"
