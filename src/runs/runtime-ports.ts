import { and, eq } from 'drizzle-orm'
import type { Db } from '../db/client.js'
import type { ArtifactWriter, KnowledgeTools, MemorySearch, RunDirectory, RunEventWriter, SkillTools } from '../runtime/ports.js'
import type { RunKnowledge } from './knowledge-port.js'
import type { RunArtifacts } from './artifact-port.js'
import type { RunEventSink, RunMemory } from './memory-port.js'
import { realUserIdOfRun } from './run-ref.js'
import type { RunSkills } from './skills-port.js'
import { getRun } from './runs-repo.js'
import { runs } from './tables.js'

/**
 * The runs group's side of the agent runtime's ports (src/runtime/ports.ts): which
 * thread a run belongs to, where tool and approval events go, and what `memory_search`
 * searches. Always scoped to the caller's org.
 */
export function runDirectory(db: Db): RunDirectory {
  return {
    async threadOfRun(orgId, runId) {
      const run = await getRun(db, orgId, runId)
      return run ? { rootRunId: run.rootRunId } : null
    },
    async threadExists(orgId, rootRunId) {
      const rows = await db.select({ id: runs.id }).from(runs).where(and(eq(runs.orgId, orgId), eq(runs.rootRunId, rootRunId))).limit(1)
      return rows.length > 0
    }
  }
}

/** `write_artifact` saves through the artifacts port and announces `artifact.created` on the run. */
export function runArtifactWriter(artifacts: RunArtifacts, sink: RunEventSink): ArtifactWriter {
  return {
    async write(ref, file) {
      const saved = await artifacts.save({ orgId: ref.orgId, runId: ref.runId, rootRunId: ref.rootRunId }, file)
      await sink.emit({ orgId: ref.orgId, runId: ref.runId, type: 'artifact.created', data: { ...saved } })
      return saved
    }
  }
}

export function runEventWriter(sink: RunEventSink): RunEventWriter {
  return {
    emit: (orgId, runId, type, data) => sink.emit({ orgId, runId, type, data })
  }
}

/** `memory_search` recalls through the run's memory, so it is recorded in the recall ledger too. */
export function runMemorySearch(db: Db, memory: RunMemory): MemorySearch {
  return {
    async search(ref, query, limit) {
      const run = await getRun(db, ref.orgId, ref.runId)
      if (!run) return []
      const { items } = await memory.recall({ id: run.id, rootRunId: run.rootRunId, orgId: run.orgId, realUserId: realUserIdOfRun(run) }, query)
      return items.slice(0, limit).map(({ id, content, score }) => ({ id, content, score }))
    }
  }
}

/** `propose_skill` goes to the skills group as the run. */
export function runSkillTools(skills: RunSkills): SkillTools {
  return { propose: (ref, proposal) => skills.propose(ref, proposal) }
}

/** `knowledge_search` and `propose_knowledge` go to the knowledge group as the run. */
export function runKnowledgeTools(knowledge: RunKnowledge): KnowledgeTools {
  return {
    search: (ref, query, limit) => knowledge.search(ref, query, limit),
    propose: (ref, draft) => knowledge.propose(ref, draft)
  }
}
