// Issue 2: GET /api/health and GET /api/config against a bare Node http server, same run.
import { load, startServer, table, type Result } from './lib.js'

export async function benchFoundation(): Promise<string> {
  const rows: Result[] = []
  const bare = await startServer('bench/bare-server.ts')
  try {
    rows.push(await load({ url: `${bare.url}/api/health`, name: 'bare node http (baseline)' }))
  } finally {
    await bare.stop()
  }
  const cairn = await startServer('bench/cairn-server.ts')
  try {
    rows.push(await load({ url: `${cairn.url}/api/health`, name: 'GET /api/health' }))
    rows.push(await load({ url: `${cairn.url}/api/config`, name: 'GET /api/config' }))
  } finally {
    await cairn.stop()
  }
  return table(rows, rows[0]!)
}
