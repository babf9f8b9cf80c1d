import type { EngineInfo, ModelInfo } from '../../../plugins/features.js'
import type { Engine } from './types.js'

/** The engines of one instance, with the `/api/config` catalog. */
export class EngineRegistry {
  readonly engines: Map<string, Engine>

  constructor(engines: Engine[]) {
    this.engines = new Map(engines.map((e) => [e.id, e]))
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

  /** Picks the engine and model for a request: explicit engine, or the engine owning the model, else echo. */
  async resolve(engineId: string | undefined, model: string | undefined): Promise<{ engine: Engine; model: string | null } | { error: string }> {
    let engine: Engine | undefined
    if (engineId !== undefined) {
      engine = this.engines.get(engineId)
      if (!engine || !(await engine.ready())) return { error: `engine ${JSON.stringify(engineId)} is not available` }
    } else if (model !== undefined) {
      for (const candidate of this.engines.values()) {
        if ((await candidate.ready()) && (await candidate.models()).some((m) => m.id === model)) {
          engine = candidate
          break
        }
      }
      if (!engine) return { error: `model ${JSON.stringify(model)} is not available` }
    } else {
      engine = this.engines.get('echo')!
    }
    const models = await engine.models()
    if (model !== undefined && !models.some((m) => m.id === model)) {
      return { error: `model ${JSON.stringify(model)} is not available on engine ${engine.id}` }
    }
    return { engine, model: model ?? models[0]?.id ?? null }
  }
}
