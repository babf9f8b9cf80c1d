import type { ChatMessage } from '../engines/types.js'
import type { RunRow } from '../runs-repo.js'

/**
 * What a chat platform adds to a run's context before it starts: the messages people wrote
 * in the platform's thread that no run saw (a colleague's correction between two mentions),
 * as user messages that name their author. Cheap for runs that concern it not: it looks at
 * the run's origin and `metadata` before anything else. A failure here never fails a run (the
 * worker logs it and goes on without the messages).
 */
export interface RunThreadContext {
  messagesFor(run: RunRow, signal: AbortSignal): Promise<ChatMessage[]>
}
