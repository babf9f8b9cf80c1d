#!/usr/bin/env bash
# Builds and installs pgvector for the machine's PostgreSQL from Debian's source package (the
# release bookworm's PostgreSQL 15 has none as a binary): trixie's source, built against
# postgresql-server-dev-<major>. Run as root; .ci/run calls it when the server lacks `vector`.
set -euo pipefail
major=$(ls /etc/postgresql | sort -n | tail -1)
export DEBIAN_FRONTEND=noninteractive
command -v pg_config >/dev/null 2>&1 && dpkg -s "postgresql-server-dev-$major" >/dev/null 2>&1 \
  || apt-get install -y -qq "postgresql-server-dev-$major" build-essential
if ! apt-cache showsrc pgvector 2>/dev/null | grep -q '^Package: pgvector'; then
  # the source package of the next Debian release, from the mirror this machine already uses
  mirror=$(grep -h '^URIs:' /etc/apt/sources.list.d/*.sources 2>/dev/null | grep -v security | head -1 | awk '{print $2}')
  [ -n "$mirror" ] || mirror=$(grep -hE '^deb ' /etc/apt/sources.list 2>/dev/null | grep -v security | head -1 | awk '{print $2}')
  [ -n "$mirror" ] || { echo "no Debian mirror configured for apt"; exit 1; }
  printf 'Types: deb-src\nURIs: %s\nSuites: trixie\nComponents: main\nSigned-By: /usr/share/keyrings/debian-archive-keyring.gpg\n' \
    "$mirror" >/etc/apt/sources.list.d/cairn-pgvector-src.sources
  apt-get update -qq
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$work"
apt-get source --download-only pgvector >/dev/null
tar xzf pgvector_*.orig.tar.gz
cd pgvector-*/
make -j2 PG_CONFIG="/usr/lib/postgresql/$major/bin/pg_config" >/dev/null
make install PG_CONFIG="/usr/lib/postgresql/$major/bin/pg_config" >/dev/null
