import type { FastifyInstance } from 'fastify'
import fp from 'fastify-plugin'

export interface EngineInfo {
  id: string
  name: string
}
export interface ModelInfo {
  id: string
  engine: string
  name: string
}

/**
 * What this instance can do, as `GET /api/config` tells clients. Each domain plugin
 * switches on what it provides when it registers, so the answer never claims
 * something that is not there.
 */
export interface Features {
  auth: { google: boolean; emailPassword: boolean }
  /** where tools run; `available: false` with a `reason` when nowhere (contract 1.3) */
  sandbox: { provider: string; available: boolean; confinement: string | null; reason: string | null }
  capabilities: { github: boolean; slack: boolean; memory: boolean; toolGateway: boolean }
  artifactsFidelity: 'full' | 'preview'
  /** sources of engines and models; each reports only what is ready right now */
  catalogs: Array<() => Promise<{ engines: EngineInfo[]; models: ModelInfo[] }>>
}

declare module 'fastify' {
  interface FastifyInstance {
    features: Features
  }
}

export default fp(
  async function featuresPlugin(app: FastifyInstance) {
    const features: Features = {
      auth: { google: false, emailPassword: false },
      sandbox: { provider: 'none', available: false, confinement: null, reason: 'no sandbox provider is configured' },
      capabilities: { github: false, slack: false, memory: false, toolGateway: false },
      artifactsFidelity: 'preview',
      catalogs: []
    }
    app.decorate('features', features)
  },
  { name: 'features', fastify: '5.x' }
)
