import { useState } from 'preact/hooks'
import { api, ApiError } from '../api.js'
import { Link, useAction } from '../ui.js'

export function SignInView({ onSignedIn }: { onSignedIn: () => void }) {
  const [email, setEmail] = useState('')
  const [password, setPassword] = useState('')
  const signIn = useAction(async () => {
    await api('POST', '/auth/sign-in', { email, password })
    onSignedIn()
  })
  const error = signIn.error
  return (
    <section aria-labelledby="sign-in-title" class="narrow">
      <h1 id="sign-in-title">Sign in</h1>
      <p class="lede">
        Sign in to see your organization’s memory and your personal pool. On this machine you can also use the Memory
        Hub without signing in, as the shared dev organization (it has no personal pool).
      </p>
      <form
        class="stack"
        onSubmit={(e) => {
          e.preventDefault()
          signIn.run()
        }}
      >
        <label for="email">Email</label>
        <input
          id="email"
          type="email"
          autoComplete="username"
          required
          value={email}
          onInput={(e) => setEmail((e.target as HTMLInputElement).value)}
        />
        <label for="password">Password</label>
        <input
          id="password"
          type="password"
          autoComplete="current-password"
          required
          value={password}
          onInput={(e) => setPassword((e.target as HTMLInputElement).value)}
        />
        <button type="submit" disabled={signIn.pending}>
          {signIn.pending ? 'Signing in…' : 'Sign in'}
        </button>
        {error ? (
          <p class="state error" role="alert">
            {error instanceof ApiError && error.code === 'invalid_credentials'
              ? 'Wrong email or password.'
              : error instanceof ApiError && error.code === 'rate_limited'
                ? 'Too many attempts: wait a minute and try again.'
                : (error as Error).message}
          </p>
        ) : null}
      </form>
      <p>
        New to Cairn? <Link to="/sign-up">Create an account</Link>
      </p>
    </section>
  )
}

/** Creating an account (signed in at once, with no organization yet). */
export function SignUpView({ onSignedUp }: { onSignedUp: () => void }) {
  const [name, setName] = useState('')
  const [email, setEmail] = useState('')
  const [password, setPassword] = useState('')
  const signUp = useAction(async () => {
    await api('POST', '/auth/sign-up', { name: name.trim(), email: email.trim(), password })
    onSignedUp()
  })
  const error = signUp.error
  return (
    <section aria-labelledby="sign-up-title" class="narrow">
      <h1 id="sign-up-title">Create an account</h1>
      <form
        class="stack"
        onSubmit={(e) => {
          e.preventDefault()
          signUp.run()
        }}
      >
        <label for="name">Name</label>
        <input
          id="name"
          autoComplete="name"
          required
          maxLength={100}
          value={name}
          onInput={(e) => setName((e.target as HTMLInputElement).value)}
        />
        <label for="email">Email</label>
        <input
          id="email"
          type="email"
          autoComplete="username"
          required
          value={email}
          onInput={(e) => setEmail((e.target as HTMLInputElement).value)}
        />
        <label for="password">Password (at least 8 characters)</label>
        <input
          id="password"
          type="password"
          autoComplete="new-password"
          required
          minLength={8}
          maxLength={256}
          value={password}
          onInput={(e) => setPassword((e.target as HTMLInputElement).value)}
        />
        <button type="submit" disabled={signUp.pending}>
          {signUp.pending ? 'Creating…' : 'Create account'}
        </button>
        {error ? (
          <p class="state error" role="alert">
            {error instanceof ApiError && error.status === 409
              ? 'There is already an account with this email: sign in instead.'
              : error instanceof ApiError && error.code === 'rate_limited'
                ? 'Too many attempts: wait a minute and try again.'
                : (error as Error).message}
          </p>
        ) : null}
      </form>
      <p>
        Have an account? <Link to="/sign-in">Sign in</Link>
      </p>
    </section>
  )
}
