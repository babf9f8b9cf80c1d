import type { Db, Tx } from '../../db/client.js'
import { LRUCache } from 'lru-cache'
import { EngineError, type Engine, type EngineInfo, type ModelInfo } from './types.js'

/** The engine of an org's provider that offers a model, or null (src/runs/ports/providers.ts). */
export type OrgEngineLookup = (orgId: string, model: string, db?: Db | Tx) => Promise<Engine | null>
/** What an org's default model is made of (src/runs/ports/providers.ts). */
export interface OrgModelDefaults {
  chosen: string | null
  firstProviderModel: string | null
  /** the kind of the org's oldest provider; null when it has none */
  providerKind: 'openai' | 'anthropic' | null
}
/** The org's chosen default model and its first provider model (src/runs/ports/providers.ts). */
export type OrgDefaultsLookup = (orgId: string, db?: Db | Tx) => Promise<OrgModelDefaults>

/** The engines an org provider's models run on (its `kind`). */
const PROVIDER_ENGINES = new Set(['openai', 'anthropic'])

/** What an engine is configured with, reachable or not. */
const configuredModels = (engine: Engine) => (engine.configuredModels ? engine.configuredModels() : engine.models())

/** Where an org's default model came from. */
export type DefaultSource = 'org' | 'deployment' | 'provider' | 'echo'

/**
 * The engines of one instance, with the `/api/config` catalog. A model the deployment does
 * not serve may be an org provider's: `resolve` with an org id and `forRun`
 * ask `orgEngine` then, and only then, so runs of the deployment's models cost no lookup.
 * The deployment's models come first: an org provider cannot take over one of their ids.
 */
export class EngineRegistry {
  readonly engines: Map<string, Engine>
  private readonly orgEngine: OrgEngineLookup | null
  private readonly orgDefaults: OrgDefaultsLookup | null

  constructor(
    engines: Engine[],
    orgEngine: OrgEngineLookup | null = null,
    orgDefaults: OrgDefaultsLookup | null = null
  ) {
    this.engines = new Map(engines.map((e) => [e.id, e]))
    this.orgEngine = orgEngine
    this.orgDefaults = orgDefaults
  }

  /**
   * The org defaults read from the database, for 2 s: a dispatch naming no model costs no
   * query in a burst. A change on this instance is seen at once (`forgetDefaults`), on
   * another within the 2 s.
   */
  private readonly defaultsCache = new LRUCache<string, OrgModelDefaults>({
    max: 10_000,
    ttl: 2000
  })

  forgetDefaults(orgId: string): void {
    this.defaultsCache.delete(orgId)
  }

  /**
   * The org's default model: the one its admin chose, while something is still configured
   * with it; else the deployment's first model; else its providers' first model; else echo,
   * only when neither the deployment nor the org configures any model. Decided from
   * configuration alone, never from whether a probe answered in time: a model that is down
   * fails the runs that use it, saying so, instead of answering them with their own prompt.
   * What a run, chat, skill, playbook, task, automation or Slack run naming neither engine
   * nor model gets.
   */
  async defaultModel(
    orgId: string,
    db?: Db | Tx
  ): Promise<{ engine: Engine; model: string | null; source: DefaultSource }> {
    let defaults = this.defaultsCache.get(orgId)
    if (!defaults) {
      defaults = this.orgDefaults
        ? await this.orgDefaults(orgId, db)
        : { chosen: null, firstProviderModel: null, providerKind: null }
      this.defaultsCache.set(orgId, defaults)
    }
    if (defaults.chosen !== null) {
      const chosen = await this.resolve(undefined, defaults.chosen, orgId, db, false)
      if (!('error' in chosen)) return { ...chosen, source: 'org' }
    }
    let configured: Engine | null = null
    for (const engine of this.engines.values()) {
      if (engine.id === 'echo' || engine.configured === false) continue
      const [first] = await configuredModels(engine)
      if (first) return { engine, model: first.id, source: 'deployment' }
      configured ??= engine
    }
    if (defaults.firstProviderModel !== null) {
      const provider = await this.resolve(undefined, defaults.firstProviderModel, orgId, db, false)
      if (!('error' in provider)) return { ...provider, source: 'provider' }
    }
    // configured, but no model of it is known (its models endpoint never answered, or an org
    // provider lists none yet): runs fail saying so, never echo
    if (configured) return { engine: configured, model: null, source: 'deployment' }
    if (defaults.providerKind !== null) {
      const engine = this.engines.get(defaults.providerKind)
      if (engine) return { engine, model: null, source: 'provider' }
    }
    return { engine: this.engines.get('echo')!, model: 'echo', source: 'echo' }
  }

  get(id: string): Engine | undefined {
    return this.engines.get(id)
  }

  async catalog(): Promise<{ engines: EngineInfo[]; models: ModelInfo[] }> {
    const out = { engines: [] as EngineInfo[], models: [] as ModelInfo[] }
    for (const engine of this.engines.values()) {
      if (!(await engine.ready())) continue
      out.engines.push({ id: engine.id, name: engine.name })
      out.models.push(...(await engine.models()))
    }
    return out
  }

  /**
   * Picks the engine and model for a request: explicit engine, or the engine owning the model; naming neither, the
   * org's default model (echo without an org id); with an org id, a model no deployment engine serves may be one of
   * that org's providers' (engine `openai`), looked up on `db` when given (a caller in a transaction).
   */
  async resolve(
    engineId: string | undefined,
    model: string | undefined,
    orgId?: string,
    db?: Db | Tx,
    orgDefault = true
  ): Promise<{ engine: Engine; model: string | null } | { error: string }> {
    // naming neither: the org's default model, never a silent echo
    if (engineId === undefined && model === undefined && orgId !== undefined && orgDefault) {
      const { engine, model: chosen } = await this.defaultModel(orgId, db)
      return { engine, model: chosen }
    }
    const chosen = await this.resolveDeployment(engineId, model)
    if (!('error' in chosen) || orgId === undefined || model === undefined || this.orgEngine === null) return chosen
    if (engineId !== undefined && !PROVIDER_ENGINES.has(engineId)) return chosen
    const engine = await this.orgEngine(orgId, model, db)
    if (engine && engineId !== undefined && engine.id !== engineId) return chosen
    return engine ? { engine, model } : chosen
  }

  /**
   * The engine that executes a stored run: the deployment's, unless the run is an `openai`
   * run of a model the deployment does not serve and one of the org's providers does.
   */
  async forRun(run: { orgId: string; engine: string; model: string | null }): Promise<Engine | undefined> {
    const engine = this.engines.get(run.engine)
    if (!PROVIDER_ENGINES.has(run.engine) || run.model === null || this.orgEngine === null) return engine
    const deployment = engine !== undefined && engine.configured !== false
    if (deployment && (await configuredModels(engine)).some((m) => m.id === run.model)) return engine
    const provider = await this.orgEngine(run.orgId, run.model)
    if (provider) return provider
    if (deployment) return engine
    // accepted for a provider that has since been deleted or stopped being ready
    throw new EngineError(
      `model_unavailable: no provider of this organization offers ${JSON.stringify(run.model)} any more`
    )
  }

  private async resolveDeployment(
    engineId: string | undefined,
    model: string | undefined
  ): Promise<{ engine: Engine; model: string | null } | { error: string }> {
    let engine: Engine | undefined
    if (engineId !== undefined) {
      // configured, reachable or not: a run of a model that is down fails saying so, it is not refused
      engine = this.engines.get(engineId)
      if (!engine || engine.configured === false)
        return { error: `engine ${JSON.stringify(engineId)} is not available` }
    } else if (model !== undefined) {
      for (const candidate of this.engines.values()) {
        if (candidate.configured !== false && (await configuredModels(candidate)).some((m) => m.id === model)) {
          engine = candidate
          break
        }
      }
      if (!engine) return { error: `model ${JSON.stringify(model)} is not available` }
    } else {
      engine = this.engines.get('echo')!
    }
    const models = await configuredModels(engine)
    if (model !== undefined && !models.some((m) => m.id === model)) {
      return { error: `model ${JSON.stringify(model)} is not available on engine ${engine.id}` }
    }
    return { engine, model: model ?? models[0]?.id ?? null }
  }
}
