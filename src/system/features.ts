import type { EngineInfo, ModelInfo } from '../runs/engines/types.js'

/** Where engines and models come from; each reports only what is ready right now. */
export type Catalog = () => Promise<{ engines: EngineInfo[]; models: ModelInfo[] }>

/**
 * What this instance can do, as `GET /api/config` tells clients. `buildApp` assembles it once,
 * from what each service reports about itself after it registered, so the answer never claims
 * something that is not there; nothing writes to it afterwards.
 */
export interface Features {
  readonly auth: { readonly google: boolean; readonly emailPassword: boolean }
  /** where tools run; `available: false` with a `reason` when nowhere */
  readonly sandbox: {
    readonly provider: string
    readonly available: boolean
    readonly confinement: string | null
    readonly reason: string | null
  }
  readonly capabilities: {
    readonly github: boolean
    readonly slack: boolean
    readonly memory: boolean
    /** memory and knowledge search also match meaning (pgvector is there) */
    readonly semanticSearch: boolean
    readonly toolGateway: boolean
  }
  readonly artifactsFidelity: 'full' | 'preview'
  readonly catalogs: readonly Catalog[]
}
