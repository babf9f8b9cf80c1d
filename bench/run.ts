// npm run bench [-- name …]: runs the named benchmarks (all by default) and prints
// Markdown tables of requests/s, p99 and the ratio to the baseline measured in the same run.
import { benchApprovals } from './approvals.js'
import { benchArtifacts } from './artifacts.js'
import { benchAutomations } from './automations.js'
import { benchCompletion } from './completion.js'
import { benchConsole } from './console.js'
import { benchFoundation } from './foundation.js'
import { benchHistory } from './history.js'
import { benchHub } from './hub.js'
import { benchIdentity } from './identity.js'
import { benchKnowledge } from './knowledge.js'
import { benchMemory } from './memory.js'
import { benchMcp } from './mcp.js'
import { benchMcpRunStart } from './mcp-run-start.js'
import { benchModelBound } from './model-bound.js'
import { benchModelDown } from './model-down.js'
import { benchRecall } from './recall.js'
import { benchRetrieval } from './retrieval.js'
import { benchRetrievalQuality } from './retrieval-quality.js'
import { benchRunCost } from './run-cost.js'
import { benchRuns } from './runs.js'
import { benchSqlSpeed } from './sql-speed.js'
import { benchClaimCpu } from './claim-cpu.js'
import { benchRuntime } from './runtime.js'
import { benchSkills } from './skills.js'
import { benchTelemetry } from './telemetry.js'
import { benchTopology } from './topology.js'
import { benchUsage } from './usage.js'
import { benchSlack } from './slack.js'
import { benchWorkspaces } from './workspaces.js'

const benches: Record<string, () => Promise<string>> = {
  foundation: benchFoundation,
  identity: benchIdentity,
  runs: benchRuns,
  'run-cost': benchRunCost,
  'sql-speed': benchSqlSpeed,
  'claim-cpu': benchClaimCpu,
  topology: benchTopology,
  completion: benchCompletion,
  'model-bound': benchModelBound,
  'model-down': benchModelDown,
  approvals: benchApprovals,
  history: benchHistory,
  runtime: benchRuntime,
  memory: benchMemory,
  recall: benchRecall,
  artifacts: benchArtifacts,
  knowledge: benchKnowledge,
  skills: benchSkills,
  automations: benchAutomations,
  usage: benchUsage,
  slack: benchSlack,
  hub: benchHub,
  console: benchConsole,
  workspaces: benchWorkspaces,
  mcp: benchMcp,
  'mcp-run-start': benchMcpRunStart,
  retrieval: benchRetrieval,
  'retrieval-quality': benchRetrievalQuality,
  telemetry: benchTelemetry
}

const wanted = process.argv.slice(2)
for (const name of wanted.length > 0 ? wanted : Object.keys(benches)) {
  const bench = benches[name]
  if (!bench) {
    process.stderr.write(`unknown benchmark ${name}; known: ${Object.keys(benches).join(', ')}\n`)
    process.exit(2)
  }
  process.stdout.write(`\n## ${name}\n\n${await bench()}\n`)
}
