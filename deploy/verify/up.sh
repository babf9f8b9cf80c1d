#!/bin/sh
# Not part of the product: brings compose.yaml up with compose.verify.yaml (a stand-in
# model), then runs check-stack.mjs against it. From anywhere in the repository:
#   deploy/verify/up.sh            # build, up, check (the stack stays up)
#   deploy/verify/up.sh down -v    # other arguments go to compose instead
# With Compose v2 (`docker compose`) compose.yaml is used as it is. Compose v1
# (`docker-compose`, Debian's package) cannot send `security_opt: systempaths=unconfined`
# (the Docker CLI and Compose v2 turn it into empty masked and read-only /proc paths; v1
# passes it to the daemon, which refuses it), so for v1 that line is left out of a copy
# and the instances run `privileged` instead, which also leaves /proc unmasked.
set -eu
cd "$(dirname "$0")/../.."
if docker compose version >/dev/null 2>&1; then
  COMPOSE="docker compose -f compose.yaml -f deploy/verify/compose.verify.yaml"
else
  work=${STANDIN_DIR:-/var/tmp/cairn-standins}
  mkdir -p "$work"
  grep -v 'systempaths=unconfined' compose.yaml > "$work/compose.v1.yaml"
  printf 'services:\n  cairn-1: { privileged: true }\n  cairn-2: { privileged: true }\n  cairn-3: { privileged: true }\n' > "$work/compose.v1-privileged.yaml"
  COMPOSE="docker-compose --project-directory . -f $work/compose.v1.yaml -f deploy/verify/compose.verify.yaml -f $work/compose.v1-privileged.yaml"
fi
export COMPOSE
if [ $# -gt 0 ]; then exec $COMPOSE "$@"; fi
$COMPOSE up -d --build
exec node deploy/verify/check-stack.mjs
