import type { RunRow } from './runs-repo.js'

/** The run's real signed-in user (origin `web`), for personal memory pools; null otherwise. */
export function realUserIdOfRun(run: Pick<RunRow, 'origin' | 'userId'>): string | null {
  return run.origin === 'web' ? run.userId : null
}
