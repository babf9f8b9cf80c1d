import { spawn } from 'node:child_process'
import { once } from 'node:events'

export interface Started {
  url: string
  pid: number
  output: () => string
  exit: Promise<number | null>
  kill: (signal: NodeJS.Signals) => boolean
}

/**
 * How a test's child process loads the TypeScript sources: as the tests themselves do (.taprc),
 * Node stripping the types and scripts/ts-resolve.mjs resolving `./x.js` to `./x.ts`.
 */
export const TS_LOADER = ['--import', './scripts/ts-resolve.mjs']

/** Spawns the server (src/server.ts, as `npm start` runs the built file) with its own env; waits for nothing. */
export function spawnServer(env: Record<string, string>, args = [...TS_LOADER, 'src/server.ts']) {
  const child = spawn(process.execPath, args, {
    env: { ...process.env, PORT: '0', HOST: '127.0.0.1', LOG_LEVEL: 'info', DATABASE_URL: '', ...env },
    stdio: ['ignore', 'pipe', 'pipe']
  })
  let output = ''
  let stderr = ''
  child.stdout.on('data', (chunk) => {
    output += chunk
  })
  child.stderr.on('data', (chunk) => {
    output += chunk
    stderr += chunk
  })
  const exit = once(child, 'exit').then(([code]) => code as number | null)
  return { child, exit, output: () => output, stderr: () => stderr }
}

/** Runs the server on its own data dir and waits for its "API at" line. */
export async function startServer(env: Record<string, string>, args?: string[]): Promise<Started> {
  const { child, exit, output } = spawnServer(env, args)
  const url = await new Promise<string>((resolve, reject) => {
    const timer = setInterval(() => {
      const match = /API at (http:\/\/127\.0\.0\.1:\d+)\/api/.exec(output())
      if (match) {
        clearInterval(timer)
        resolve(match[1]!)
      }
    }, 50)
    void exit.then((code) => {
      clearInterval(timer)
      reject(new Error(`server exited with ${code}: ${output()}`))
    })
  })
  return { url, pid: child.pid!, output, exit, kill: (signal) => child.kill(signal) }
}

/** The `msg` of every JSON log line. */
export const messages = (output: string) =>
  output
    .split('\n')
    .filter((line) => line.startsWith('{'))
    .map((line) => JSON.parse(line).msg as string)
