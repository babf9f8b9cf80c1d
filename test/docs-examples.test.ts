import { execFile } from 'node:child_process'
import { createServer } from 'node:http'
import { mkdtempSync, readFileSync, readdirSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { promisify } from 'node:util'
import { Server } from '@modelcontextprotocol/sdk/server/index.js'
import { StreamableHTTPServerTransport } from '@modelcontextprotocol/sdk/server/streamableHttp.js'
import { CallToolRequestSchema, ListToolsRequestSchema } from '@modelcontextprotocol/sdk/types.js'
import t from 'tap'
import { startFakeGitHub } from './github/fake-github.js'
import { embeddedPassOnly } from './passes.js'
import { startFakeProvider } from './providers/fake-provider.js'
import { startAnthropicUpstream } from './runs/anthropic-upstream.js'
import { startOpenAiUpstream } from './runs/openai-upstream.js'
import { startServer } from './server-process.js'
import { startFakeSlack } from './slack/fake-slack.js'

const run = promisify(execFile)

/**
 * Every shell example of the guides (docs/*.md), run as a reader would paste it: each
 * ```sh block on its own with `bash -euo pipefail`, in a fresh folder per guide, against
 * one fresh server (started as `npm start` runs it, on the embedded database). What a
 * block needs from outside (a model provider, GitHub, Slack, an MCP server) is a local
 * stand-in speaking the same protocol; the placeholders a reader replaces with their own
 * values (a key, a provider's address) are replaced here with the stand-ins'.
 */

/** Guides whose examples this test does not run, and why. */
const notRun: Record<string, string> = {
  'deployment.md': 'needs a PostgreSQL server (createdb) and starts the service itself',
  'benchmarks.md': 'measurements, not examples'
}

/** Single blocks that are not run (by guide and the block's first line), and why. */
const blocksNotRun: Record<string, string> = {
  'console.md: npm ci && npm start': 'installs the dependencies and starts the server, then opens a browser'
}

/** The shell blocks of a guide, in order. */
function blocks(guide: string): string[] {
  const md = readFileSync(join('docs', guide), 'utf8')
  return [...md.matchAll(/^```(?:sh|bash)\n([\s\S]*?)^```$/gm)].map((m) => m[1]!)
}

interface Check {
  pattern: RegExp
  what: string
}
const check = (pattern: RegExp, what: string): Check => ({ pattern, what })

/** What each guide's examples must show, beyond every block exiting 0. */
const checks: Record<string, Check[]> = {
  'accounts.md': [
    check(/\{"user":\{"id":"[^"]+","email":"ada@example\.com"/, 'Ada signed up'),
    check(/"organization":\{[^}]*"name":"Analytical Engines"[^}]*"role":"owner"/, 'her organization, hers to own'),
    check(/"kind":"user"/, 'whoami knows her'),
    check(/\{"items":\[\],"nextCursor":null\}/, 'the minted key reads the runs'),
    check(/"items":\[\{"id":"[^"]+","name":"ci","last4":"[^"]{4}"/, 'the key listed by its last four'),
    check(/"member":\{[^\n]*"role":"member"/, 'Grace added as a member'),
    check(/\{"kind":"anonymous"/, 'signed out, the old cookie opens nothing'),
    check(/^(?![\s\S]*\{"error":")/, 'nothing refused')
  ],
  'artifacts.md': [
    check(/"contentType":"application\/pdf"/, 'the upload sniffed as a PDF'),
    check(/HTTP\/1\.1 206 Partial Content[\s\S]*etag: "v1"[\s\S]*\r\n\r\n# No/, 'a range of version 1'),
    check(/(?<!\d)304$/m, 'revalidation'),
    check(/"name":"notes\.md"[^\n]*"version":2/, 'the edit made version 2'),
    check(/-first draft\n\+better/, "the proposal's diff"),
    check(/"version":3[^\n]*"state":"accepted"/, 'accepted as version 3'),
    check(/^(?![\s\S]*\{"error":")/, 'nothing refused')
  ],
  'automations.md': [
    check(/"items":\[\{"name":"GITHUB_TOKEN"/, 'the secret listed by name'),
    check(/"engine":"openai","model":"tool-model","prompt":"list my repos"/, 'a model run naming the secret'),
    check(
      /"description":"At 09:00, Monday through Friday","nextRuns":\["\d{4}-\d\d-\d\dT0[78]:00:00\.000Z"/,
      'the schedule, described'
    ),
    check(/"prompt":"yesterday","status":"queued","origin":"automation"/, 'triggered now'),
    check(/"enabled":false/, 'disabled'),
    check(/^(?![\s\S]*\{"error":")/, 'nothing refused')
  ],
  'dashboard.md': [
    check(/^\{"runs":\{"total":\d+,"byStatus":\{/, 'the dashboard'),
    check(/\{"buckets":\[\{"date":"2026-10-01","engine":/, 'the usage by day')
  ],
  'github.md': [
    check(/"integration":\{"kind":"github","connected":true,"account":"acme"/, 'connected'),
    check(/"fullName":"acme\/tools"/, 'the repositories'),
    check(/"title":"Add a --version flag"/, 'the pull requests'),
    check(
      /"skill":\{[^\n]*"name":"pdf"[^\n]*"source":\{"kind":"github","repo":"acme\/skills","path":"skills\/pdf"/,
      'the skill imported'
    ),
    check(/Wiki of acme\/tools at [0-9a-f]{12}: \d+ pages/m, 'the wiki built'),
    check(/"title":"acme\/tools: overview"/, 'its pages'),
    check(/(?<!\d)204$/m, 'disconnected'),
    check(/^(?![\s\S]*\{"error":")/, 'nothing refused')
  ],
  'knowledge.md': [
    check(/"body":"Run `make ship`\.",[^\n]*"version":2/, "the record's second version"),
    check(/"snippet":"Run `<mark>make<\/mark> <mark>ship<\/mark>`\."/, 'found by its phrase'),
    check(/"latencyMs":[\d.]+\}\{"items":\[\{"kind":"record"[^}]*"title":"Deploys"/, 'and despite a typo'),
    check(/"name":"handbook\.md"[^\n]*"state":"ready","chunkCount":1/, 'the document extracted'),
    check(/"heading":"Handbook > On-call"/, 'its chunk'),
    check(/"title":"On-call escalation"/, 'the draft approved as a record')
  ],
  'mcp.md': [
    check(/\\"status\\":\\"succeeded\\",\\"output\\":\\"hello\\"/, 'start_run answered through MCP'),
    check(/HTTP\/1\.1 200[^]*?content-type: text\/event-stream[^]*?^: stream open/im, 'the server stream opened'),
    check(
      /"name":"tickets"[^\n]*"ready":true[^\n]*"tools":\[\{"name":"search"/,
      'the tickets server connected, its tool listed'
    ),
    check(/\{"tool":"mcp__tickets__search","mode":"auto"/, 'its tool runs without a person'),
    check(/(?<!\d)204$/m, 'disconnected'),
    check(/^(?![\s\S]*\{"error":")/, 'nothing refused')
  ],
  'memory.md': [
    check(/"item":\{[^\n]*"content":"Releases leave every Tuesday at noon"/, 'a fact added by hand'),
    check(/"content":"Remember that deploys need one approval\."/, 'a fact captured from a run'),
    check(/"failedClosed":true/, 'no personal pool for the dev org'),
    check(/"content":"Deploys need two approvals","changedBy":"dev"/, 'the correction in the history'),
    check(/\{"ok":true,"deletedCount":1\}/, 'deleted'),
    check(/\{"enabled":false,"extract":true,"orgEnabled":false/, 'memory off'),
    check(/\{"enabled":true,"extract":true,"orgEnabled":true/, 'and on again')
  ],
  'observability.md': [
    check(/^cairn_run_queue_depth\{state="queued"\} \d+$/m, 'the queue depth, scraped as Prometheus would')
  ],
  'providers.md': [
    check(/"name":"OpenRouter","kind":"openai"[^\n]*"ready":true/, 'an OpenAI-compatible provider, ready'),
    check(/"name":"Anthropic","kind":"anthropic"[^\n]*"ready":true/, 'Anthropic, ready'),
    check(/\{"id":"openai\/gpt-4o-mini","engine":"openai","providerId":"[^"]+"/, 'its model offered'),
    check(
      /"engine":"openai","model":"openai\/gpt-4o-mini",[^\n]*"status":"succeeded"[^\n]*"output":"Hello from the fake provider"/,
      'a run on it'
    ),
    check(/"organization":\{[^}]*"name":"Lin Labs"/, 'her own organization'),
    check(/\{"model":"openai\/gpt-4o-mini","source":"org"\}/, "the organization's default, read with its key"),
    check(/^(?![\s\S]*\{"error":")/, 'nothing refused')
  ],
  'runs.md': [
    check(/^HTTP\/1\.1 201 Created/m, 'a run created'),
    check(/"status":"succeeded"[^\n]*"output":"history: 1 turns: My name is Priya\."/, 'the second run saw the first'),
    check(/^idempotent-replayed: true/im, 'the retry replayed'),
    check(/event: run\.started[\s\S]*event: run\.succeeded[\s\S]*event: end/, "the run's stream, to its end"),
    check(/event: token[\s\S]*event: done/, 'the chat, streamed'),
    check(/^(?![\s\S]*\{"error":")/, 'nothing refused')
  ],
  'runtime.md': [
    check(/"tool":"shell","mode":"approve","isDefault":true/, 'shell waits for a person by default'),
    check(/requires_action$/m, 'the run waits'),
    check(/"approval":\{[^\n]*"tool":"shell"[^\n]*"status":"approved"/, 'approved'),
    check(/succeeded$/m, 'the run went on and succeeded'),
    check(/\{"tool":"shell","mode":"auto"/, 'the policy changed'),
    check(/^(?![\s\S]*\{"error":")/, 'nothing refused')
  ],
  'skills-and-tasks.md': [
    check(/^name: release-notes$/m, 'the SKILL.md back'),
    check(/"description":"Release notes, grouped"/, 'edited'),
    check(/"prompt":"since v1\.6"[^\n]*"origin":"skill"/, 'run'),
    check(/"proposal":\{[^\n]*"state":"accepted"/, 'the proposal accepted'),
    check(/"thread":\{[^\n]*"title":"v1\.7"/, "the playbook's thread"),
    check(/"title":"Write the announcement"[^\n]*"status":"doing"/, 'the task moved'),
    check(/^(?![\s\S]*\{"error":")/, 'nothing refused')
  ],
  'slack.md': [
    check(/"integration":\{"kind":"slack","connected":true,"account":"Acme"/, 'connected'),
    check(/\{"ok":true\}/, 'the signed mention accepted'),
    check(/requires_action$/m, 'its run waits on a call'),
    check(/"status":"approved","decidedBy":"slack:U0123ABCD"/, 'approved by the signed click'),
    check(/(?<!\d)204$/m, 'disconnected'),
    check(/^(?![\s\S]*\{"error":")/, 'nothing refused')
  ]
}

t.test(
  'every shell example of the guides runs as written against a fresh server',
  { skip: embeddedPassOnly },
  async (t) => {
    // stand-ins for what lies outside
    const provider = await startFakeProvider(t, { key: 'sk-or-test-key', models: ['openai/gpt-4o-mini'] })
    const anthropic = await startAnthropicUpstream(t, { key: 'sk-ant-test-key', models: ['claude-sonnet-4-5'] })
    const toolModel = await startOpenAiUpstream(t, {
      models: ['tool-model'],
      chat(body, stream) {
        const out = stream()
        const messages = body.messages as Array<{ role: string; content: string }>
        const offered = ((body.tools ?? []) as Array<{ function: { name: string } }>).map((tool) => tool.function.name)
        if (offered.includes('shell') && !messages.some((m) => m.role === 'tool')) {
          out.delta({
            role: 'assistant',
            tool_calls: [
              {
                index: 0,
                id: 'call_1',
                type: 'function',
                function: { name: 'shell', arguments: JSON.stringify({ command: 'echo hello from the sandbox' }) }
              }
            ]
          })
        } else {
          const result = messages.filter((m) => m.role === 'tool').at(-1)?.content ?? ''
          out.delta({ role: 'assistant', content: `The command said: ${result}` })
        }
        out.end()
      }
    })
    const github = await startFakeGitHub(t)
    const account = github.addAccount('acme', 'github_pat_test_token')
    github.addRepo('acme', 'tools', {
      description: 'Internal tools',
      files: {
        'README.md': '# tools\n\nSmall tools for the team.\n',
        'package.json': '{"name":"tools","version":"1.0.0"}\n',
        'docs/usage.md': '# Usage\n\nRun `tools --help`.\n'
      }
    })
    github.addPull(github.repos.get('acme/tools')!, { title: 'Add a --version flag', state: 'open' })
    github.addRepo('acme', 'skills', {
      files: {
        'skills/pdf/SKILL.md':
          '---\nname: pdf\ndescription: Read and summarize PDF files\n---\n\nSummarize the PDF in five bullet points.\n'
      }
    })
    const slack = await startFakeSlack(t)
    slack.tokens.set('xoxb-test-token', { team_id: 'T0123ABCD', team: 'Acme', user_id: 'UBOT', bot_id: 'BBOT' })
    const tickets = await startTickets(t)

    const substitutions: Record<string, Array<[string, string]>> = {
      'providers.md': [
        ['https://openrouter.ai/api/v1', provider.baseUrl],
        ['sk-or-…', provider.key],
        ['https://api.anthropic.com', anthropic.url],
        ['sk-ant-…', anthropic.key]
      ],
      'github.md': [['github_pat_…', account.token]],
      'slack.md': [['xoxb-…', 'xoxb-test-token']],
      'mcp.md': [['https://mcp.example.com/mcp', tickets]]
    }

    const dataDir = mkdtempSync(join(tmpdir(), 'cairn-docs-'))
    t.teardown(() => rmSync(dataDir, { recursive: true, force: true }))
    const server = await startServer({
      DATA_DIR: dataDir,
      SANDBOX_UNCONFINED: 'true',
      // the deployment's model (engine "openai"): one that calls `shell`, for the examples that need a model calling
      // tools
      OPENAI_BASE_URL: toolModel,
      OPENAI_API_KEY: 'sk-deployment-test',
      PROVIDER_ALLOW_PRIVATE: 'true',
      GITHUB_API_URL: github.url,
      SLACK_API_URL: slack.url,
      ECHO_WORD_DELAY_MS: '0'
    })
    t.teardown(async () => {
      server.kill('SIGTERM')
      await server.exit
    })
    const port = new URL(server.url).port
    // runs that name no model use echo, as on a server without one: the guides name a model where they need one
    const defaultModel = async (model: string) => {
      const res = await fetch(`${server.url}/api/models/default`, {
        method: 'PUT',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ model })
      })
      if (res.status !== 200) throw new Error(`PUT /api/models/default ${model}: ${res.status} ${await res.text()}`)
    }
    await defaultModel('echo')

    // in name order, on one server: a guide leaves nothing a later one trips on (runtime.md puts `shell` back to
    // approve)
    const guides = readdirSync('docs')
      .filter((name) => name.endsWith('.md'))
      .sort()
    for (const guide of guides) {
      if (notRun[guide]) {
        t.comment(`${guide}: not run: ${notRun[guide]}`)
        continue
      }
      const found = blocks(guide)
      if (found.length === 0) continue
      // Slack's runs use the org's default model: there, one that calls tools, so a call waits for a click
      if (guide === 'slack.md') await defaultModel('tool-model')
      const cwd = mkdtempSync(join(dataDir, `${guide.replace(/\.md$/, '')}-`))
      let stdout = ''
      let ran = 0
      for (const [i, block] of found.entries()) {
        const skip =
          blocksNotRun[
            `${guide}: ${block
              .split('\n')[0]!
              .replace(/\s+#.*$/, '')
              .trim()}`
          ]
        if (skip) {
          t.comment(`${guide} block ${i + 1}: not run: ${skip}`)
          continue
        }
        let script = block.replaceAll('localhost:3000', `localhost:${port}`)
        for (const [from, to] of substitutions[guide] ?? []) script = script.replaceAll(from, to)
        const started = Date.now()
        try {
          // a bare environment, so a block cannot lean on a variable it does not set (SHLVL: bash
          // started on a socket without it reads the system's bashrc, as under rshd)
          const env = { PATH: process.env.PATH!, HOME: cwd, LANG: 'C.UTF-8', SHLVL: '1' }
          const out = await run('bash', ['-euo', 'pipefail', '-c', script], { cwd, timeout: 60_000, env })
          stdout += `${out.stdout}\n`
          ran++
          t.pass(`${guide} block ${i + 1} exits 0 (${Date.now() - started} ms)`)
        } catch (error) {
          const e = error as { code?: number; stdout?: string; stderr?: string }
          t.fail(`${guide} block ${i + 1} exits 0`, { code: e.code, stdout: e.stdout, stderr: e.stderr })
          stdout += `${e.stdout ?? ''}\n`
        }
      }
      if (guide === 'slack.md') await defaultModel('echo')
      for (const { pattern, what } of checks[guide] ?? []) t.match(stdout, pattern, `${guide}: ${what}`)
      if (ran > 0 && !checks[guide]) t.fail(`${guide}: its examples have no checks in this test`)
    }
  }
)

/** A ticket system's MCP server (stateless Streamable HTTP) with one tool, `search`. */
async function startTickets(t: { teardown(fn: () => unknown): void }): Promise<string> {
  const http = createServer(async (req, res) => {
    const server = new Server({ name: 'tickets', version: '1.0.0' }, { capabilities: { tools: {} } })
    server.setRequestHandler(ListToolsRequestSchema, async () => ({
      tools: [
        {
          name: 'search',
          description: 'Search the tickets',
          inputSchema: { type: 'object', properties: { query: { type: 'string' } }, required: ['query'] }
        }
      ]
    }))
    server.setRequestHandler(CallToolRequestSchema, async (request) => ({
      content: [{ type: 'text', text: `no ticket matches ${String(request.params.arguments?.query)}` }]
    }))
    const transport = new StreamableHTTPServerTransport({ sessionIdGenerator: undefined, enableJsonResponse: true })
    res.on('close', () => void server.close())
    await server.connect(transport)
    await transport.handleRequest(req, res)
  })
  await new Promise<void>((resolve) => http.listen(0, '127.0.0.1', resolve))
  t.teardown(
    () =>
      new Promise<void>((resolve) => {
        http.closeAllConnections()
        http.close(() => resolve())
      })
  )
  return `http://127.0.0.1:${(http.address() as { port: number }).port}/mcp`
}
