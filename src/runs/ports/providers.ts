/**
 * The seam between runs and an org's model providers: a run, a chat or an
 * automation naming a model the deployment does not serve is run by the org's provider
 * that offers it, through the OpenAI-compatible engine. The providers group implements it.
 */
import type { Db, Tx } from '../../db/client.js'

/** What the OpenAI-compatible engine needs to talk to one provider. */
export interface ProviderConnection {
  id: string
  name: string
  /** the protocol it speaks: OpenAI chat completions, or Anthropic's Messages API */
  kind: 'openai' | 'anthropic'
  baseUrl: string
  models: string[]
  /** the API key, opened when a request is about to be made; null when it cannot be opened */
  apiKey(): Promise<string | null>
  /** the only way to reach the provider (the SSRF guard: checked addresses, no redirects) */
  fetch(url: string, init: RequestInit): Promise<Response>
}

export interface OrgProviders {
  /**
   * The org's provider configured with this model (the oldest, when several are), reachable
   * at its last check or not (a run of a model that is down fails saying so), or null.
   * One query, on `db` when given (a caller inside a transaction: the embedded database has
   * one connection); asked only for models the deployment does not serve.
   */
  offering(orgId: string, model: string, db?: Db | Tx): Promise<ProviderConnection | null>
  /**
   * What the org's default model is made of: the model its admin chose, its oldest provider's
   * first model, ready or not, and that provider's kind (each null when there is none). One query.
   */
  defaults(
    orgId: string,
    db?: Db | Tx
  ): Promise<{ chosen: string | null; firstProviderModel: string | null; providerKind: 'openai' | 'anthropic' | null }>
}
