/**
 * A named secret's value never appears in what a run stores or sends; it is
 * replaced by `[secret:NAME]`. `text` and `deep` redact whole values; `stream` redacts
 * text that arrives in pieces (`message.delta`), holding back the end of a piece while it
 * could be the start of a value, so a value split across two deltas is still caught.
 */
export interface NamedValue {
  name: string
  value: string
}

export class Redactor {
  /** longest first: a value that contains another is replaced whole */
  private readonly secrets: NamedValue[]

  private readonly longest: number

  constructor(secrets: NamedValue[]) {
    this.secrets = secrets.filter((s) => s.value !== '').sort((a, b) => b.value.length - a.value.length)
    this.longest = this.secrets[0]?.value.length ?? 0
  }

  get empty(): boolean {
    return this.secrets.length === 0
  }

  text(input: string): string {
    if (this.secrets.length === 0) return input
    let out = ''
    let rest = input
    for (;;) {
      const hit = this.first(rest)
      if (!hit) return out + rest
      out += rest.slice(0, hit.at) + placeholder(hit.secret.name)
      rest = rest.slice(hit.at + hit.secret.value.length)
    }
  }

  /** Every string inside a JSON-like value (keys too), redacted; other values as they are. */
  deep<T>(value: T): T {
    if (this.secrets.length === 0) return value
    const walk = (v: unknown): unknown => {
      if (typeof v === 'string') return this.text(v)
      if (Array.isArray(v)) return v.map(walk)
      if (v !== null && typeof v === 'object' && Object.getPrototypeOf(v) === Object.prototype) {
        return Object.fromEntries(Object.entries(v).map(([k, x]) => [this.text(k), walk(x)]))
      }
      return v
    }
    return walk(value) as T
  }

  /**
   * A redactor for one stream of pieces: `push` answers what may be sent now, `flush` the
   * held rest. It scans leftmost-longest like `text`, and stops where a value could still
   * begin (the rest is held), so the pieces joined equal `text` of the whole.
   */
  stream(): StreamRedactor {
    let held = ''
    return {
      push: (piece) => {
        if (this.secrets.length === 0) return piece
        const all = held + piece
        let out = ''
        let i = 0
        while (i < all.length) {
          const rest = all.length - i
          // only the last (longest value - 1) characters can be the start of a value
          if (
            rest < this.longest &&
            this.secrets.some(({ value }) => value.length > rest && value.startsWith(all.slice(i)))
          )
            break
          const hit = this.secrets.find(({ value }) => all.startsWith(value, i))
          if (hit) {
            out += placeholder(hit.name)
            i += hit.value.length
          } else {
            out += all[i]
            i++
          }
        }
        held = all.slice(i)
        return out
      },
      flush: () => {
        const rest = held
        held = ''
        return this.text(rest)
      }
    }
  }

  private first(text: string): { at: number; secret: NamedValue } | null {
    let best: { at: number; secret: NamedValue } | null = null
    for (const secret of this.secrets) {
      const at = text.indexOf(secret.value)
      if (at >= 0 && (best === null || at < best.at)) best = { at, secret }
    }
    return best
  }
}

export interface StreamRedactor {
  push(piece: string): string
  flush(): string
}

export const placeholder = (name: string) => `[secret:${name}]`

export const NO_SECRETS = new Redactor([])
