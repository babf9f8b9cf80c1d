import type { ProviderConnection } from '../ports/providers.js'
import { anthropicEngine } from './anthropic.js'
import { openAiEngine, type OpenAiOptions } from './openai.js'
import { EngineError, ModelUnavailable, type Engine } from './types.js'

function hostOf(baseUrl: string): string {
  try {
    return new URL(baseUrl).host
  } catch {
    return baseUrl
  }
}

/**
 * An org provider's models, run by the engine of its kind (OpenAI-compatible or Anthropic)
 * against the provider's base URL with its key, through its guarded fetch. The key is opened when a run or chat
 * starts (dispatch only needs to know the model is offered), and never appears in an error.
 */
export function providerEngine(
  conn: ProviderConnection,
  opts: Pick<OpenAiOptions, 'timeoutMs' | 'maxToolRounds' | 'retries' | 'retryBaseMs' | 'breakers'>
): Engine {
  const id = conn.kind
  const models = conn.models.map((model) => ({ id: model, engine: id, name: model }))

  async function connect(): Promise<{ engine: Engine; key: string }> {
    let key: string | null
    try {
      key = await conn.apiKey()
    } catch {
      key = null
    }
    if (key === null)
      throw new EngineError(
        `provider_unavailable: the API key of provider ${JSON.stringify(conn.name)} cannot be opened on this server`
      )
    const settings = {
      ...opts,
      baseUrl: conn.baseUrl,
      apiKey: key,
      models: conn.models,
      probeTtlMs: 0,
      fetch: conn.fetch,
      label: `provider ${JSON.stringify(conn.name)} at ${hostOf(conn.baseUrl)}`
    }
    const engine = conn.kind === 'anthropic' ? anthropicEngine(settings) : openAiEngine(settings)
    return { engine, key }
  }
  /** an upstream error body may quote the key back: it is cut out of the run's error */
  const hidingKey =
    (key: string) =>
    (err: unknown): never => {
      if (err instanceof EngineError && err.message.includes(key)) {
        const message = err.message.split(key).join('[provider key]')
        throw err instanceof ModelUnavailable
          ? new ModelUnavailable(message, err.retryAfterMs)
          : new EngineError(message)
      }
      throw err
    }

  return {
    id,
    name: `${conn.name} (${conn.kind === 'anthropic' ? 'Anthropic' : 'OpenAI-compatible'})`,
    async ready() {
      return true
    },
    async models() {
      return models
    },
    async run(ctx) {
      const { engine, key } = await connect()
      return engine.run(ctx).catch(hidingKey(key))
    },
    async chat(messages, model, signal, out) {
      const { engine, key } = await connect()
      return engine.chat(messages, model, signal, out).catch(hidingKey(key))
    },
    async complete(messages, model, settings, signal) {
      const { engine, key } = await connect()
      return engine.complete(messages, model, settings, signal).catch(hidingKey(key))
    }
  }
}
