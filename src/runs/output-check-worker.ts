import { parentPort } from 'node:worker_threads'
import { schemaViolation } from './output-schema.js'

// The output-check thread (output-check.ts): checks a run's output against its schema, one
// at a time, so that a slow check holds this thread and never the service's event loop.

export interface CheckRequest {
  id: number
  schema: Record<string, unknown>
  output: string
}
export type CheckAnswer = { ready: true } | { id: number; violation: string | null }

const port = parentPort!
port.on('message', (request: CheckRequest) => {
  let violation: string | null
  try {
    violation = schemaViolation(request.schema, request.output)
  } catch (err) {
    // a stack overflow or any other fault of the check: the output is not accepted
    violation = `output_invalid: the output could not be checked against the schema (${(err as Error).name})`
  }
  port.postMessage({ id: request.id, violation } satisfies CheckAnswer)
})
port.postMessage({ ready: true } satisfies CheckAnswer)
