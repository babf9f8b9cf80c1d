# syntax=docker/dockerfile:1
# Build: docker build --build-arg SERVICE_COMMIT=$(git rev-parse --short HEAD) -t cairn .
FROM node:22-bookworm-slim AS build
WORKDIR /app
# node-pty (the terminal) compiles a native addon
RUN apt-get update && apt-get install -y --no-install-recommends python3 make g++ && rm -rf /var/lib/apt/lists/*
COPY package.json package-lock.json ./
# npm ci runs the `prepare` build script; without the sources yet it skips the build
COPY scripts scripts
# patches/: fixes to installed packages, applied by npm ci's postinstall (patch-package)
COPY patches patches
RUN npm ci --no-audit --no-fund
COPY tsconfig.json tsconfig.build.json ./
COPY src src
COPY plugins plugins
COPY schemas schemas
# the Memory Hub console (contract 12): bundled into .build/hub (esbuild and preact are dev dependencies)
COPY web web
RUN node scripts/build-hub.mjs
# a plain directory (no .build/ symlink): the image runs dist/ as it is and never rebuilds
# the built-in embedder's word vectors (.build/word-vectors-*.bin), made from a dev dependency's data before it is pruned
RUN npx tsc -p tsconfig.build.json --outDir dist \
  && node --input-type=module -e "(await import('./dist/src/retrieval/embedders/offline.js')).ensureWordVectorTable()" \
  && npm prune --omit=dev --ignore-scripts

FROM node:22-bookworm-slim
ARG SERVICE_COMMIT
ENV NODE_ENV=production \
    SERVICE_COMMIT=${SERVICE_COMMIT} \
    DATA_DIR=/data \
    PORT=3000
WORKDIR /app
# the local sandbox provider: bubblewrap confines commands (it needs user namespaces:
# run with a seccomp/AppArmor profile that allows them, or it falls back with a warning);
# Xvfb and x11vnc serve the desktop
RUN apt-get update && apt-get install -y --no-install-recommends bubblewrap xvfb x11vnc && rm -rf /var/lib/apt/lists/*
COPY --from=build /app/package.json ./
COPY --from=build /app/node_modules node_modules
COPY --from=build /app/dist dist
# the console's files; the server finds them at .build/hub beside package.json
COPY --from=build /app/.build .build
COPY drizzle drizzle
RUN mkdir -p /data && chown node:node /data
USER node
EXPOSE 3000
VOLUME ["/data"]
HEALTHCHECK --interval=15s --timeout=3s --start-period=20s \
  CMD ["node", "-e", "fetch('http://127.0.0.1:'+process.env.PORT+'/api/health?ready=1').then(r=>process.exit(r.ok?0:1),()=>process.exit(1))"]
CMD ["node", "dist/src/server.js"]
