import { and, eq, sql } from 'drizzle-orm'
import { rowsOf, type Db } from '../../db/client.js'
import type {
  ArtifactWriter,
  KnowledgeTools,
  MemoryTools,
  RunDirectory,
  RunEventWriter,
  SkillTools
} from '../../runtime/ports.js'
import type { RuntimePorts } from '../../runtime/service.js'
import type { RunKnowledge } from './knowledge.js'
import type { RunArtifacts } from './artifacts.js'
import type { RunEventSink, RunMemory } from './memory.js'
import { realUserIdOfRun } from '../run-ref.js'
import type { RunSkills } from './skills.js'
import { getRun, MAX_REMEMBERED, rememberFact } from '../runs-repo.js'
import { runs } from '../tables.js'

/**
 * The runs group's side of the agent runtime's ports (src/runtime/ports.ts): which
 * thread a run belongs to, where tool and approval events go, and what `memory_search`
 * searches. Always scoped to the caller's org.
 */
function runDirectory(db: Db): RunDirectory {
  return {
    async threadOfRun(orgId, runId) {
      const run = await getRun(db, orgId, runId)
      return run ? { rootRunId: run.rootRunId, userId: run.userId } : null
    },
    async threadExists(orgId, rootRunId) {
      const rows = await db
        .select({ id: runs.id })
        .from(runs)
        .where(and(eq(runs.orgId, orgId), eq(runs.rootRunId, rootRunId)))
        .limit(1)
      return rows.length > 0
    },
    async existingThreads(keys) {
      if (keys.length === 0) return new Set<string>()
      const list = (values: string[]) =>
        sql`array[${sql.join(
          values.map((v) => sql`${v}`),
          sql`, `
        )}]::text[]`
      const rows = rowsOf<{ org_id: string; root_run_id: string }>(
        await db.execute(sql`
        select distinct r.org_id, r.root_run_id from runs r
        join unnest(${list(keys.map((k) => k.orgId))}, ${list(keys.map((k) => k.threadId))}) as k(org_id, thread_id)
          on r.org_id = k.org_id and r.root_run_id = k.thread_id`)
      )
      return new Set(rows.map((r) => `${r.org_id}/${r.root_run_id}`))
    },
    async hold(tx, orgId, runId) {
      await tx.execute(sql`select 1 from runs where org_id = ${orgId} and id = ${runId} for update`)
    },
    async decided(tx, orgId, runId) {
      await tx.execute(sql`
        update runs set resume_at = now()
        where org_id = ${orgId} and id = ${runId} and status = 'requires_action'
          and not exists (select 1 from tool_approvals a where a.org_id = ${orgId} and a.run_id = ${runId} and a.status = 'pending')`)
    }
  }
}

/** `write_artifact` saves through the artifacts port and announces `artifact.created` on the run. */
function runArtifactWriter(artifacts: RunArtifacts, sink: RunEventSink): ArtifactWriter {
  return {
    async write(ref, file) {
      const saved = await artifacts.save({ orgId: ref.orgId, runId: ref.runId, rootRunId: ref.rootRunId }, file)
      await sink.emit({ orgId: ref.orgId, runId: ref.runId, type: 'artifact.created', data: { ...saved } })
      return saved
    }
  }
}

function runEventWriter(sink: RunEventSink): RunEventWriter {
  return {
    emit: (orgId, runId, type, data) => sink.emit({ orgId, runId, type, data })
  }
}

/**
 * `memory_search` recalls through the run's memory, so it is recorded in the recall ledger
 * too; `remember` keeps a fact on the running run (runs.remembered), captured when it ends.
 */
function runMemoryTools(db: Db, memory: RunMemory): MemoryTools {
  return {
    async search(ref, query, limit, mode) {
      const run = await getRun(db, ref.orgId, ref.runId)
      if (!run) return []
      const { items } = await memory.recall(
        { id: run.id, rootRunId: run.rootRunId, orgId: run.orgId, realUserId: realUserIdOfRun(run) },
        query,
        { kind: 'query', limit, mode }
      )
      return items.map(({ id, content, score, scores }) => ({ id, content, score, ...(scores ? { scores } : {}) }))
    },
    async remember(ref, fact) {
      const run = await getRun(db, ref.orgId, ref.runId)
      if (!run) return { refused: 'the run does not exist' }
      if (fact.scope === 'personal' && realUserIdOfRun(run) === null) {
        return {
          refused: 'sign-in required: a personal fact needs a run started by a signed-in person; nothing was kept'
        }
      }
      if (!(await memory.enabled(ref.orgId)))
        return { refused: 'memory is off for this organization; nothing was kept' }
      const kept = await rememberFact(db, ref.orgId, ref.runId, fact)
      return kept === null
        ? { refused: `a run keeps at most ${MAX_REMEMBERED} facts; nothing more was kept` }
        : { kept }
    }
  }
}

/** `propose_skill` goes to the skills group as the run. */
function runSkillTools(skills: RunSkills): SkillTools {
  return { propose: (ref, proposal) => skills.propose(ref, proposal) }
}

/** `knowledge_search` and `propose_knowledge` go to the knowledge group as the run. */
function runKnowledgeTools(knowledge: RunKnowledge): KnowledgeTools {
  return {
    search: (ref, query, limit, mode) => knowledge.search(ref, query, limit, mode),
    propose: (ref, draft) => knowledge.propose(ref, draft)
  }
}

/**
 * Every port the agent runtime needs of the runs group and of what runs reach (memory,
 * artifacts, knowledge, skills), as `buildApp` hands them to the runtime service.
 */
export function forRuntime(deps: {
  db: Db
  events: RunEventSink
  memory: RunMemory
  artifacts: RunArtifacts
  knowledge: RunKnowledge
  skills: RunSkills
}): RuntimePorts {
  const { db, events, memory, artifacts, knowledge, skills } = deps
  return {
    runs: runDirectory(db),
    events: runEventWriter(events),
    memory: runMemoryTools(db, memory),
    artifacts: runArtifactWriter(artifacts, events),
    knowledge: runKnowledgeTools(knowledge),
    skills: runSkillTools(skills)
  }
}
