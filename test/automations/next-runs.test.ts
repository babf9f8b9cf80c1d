// An automation's next fire times are remembered between reads (a list shows five for each
// automation on every read); the remembered answer must equal croner's own at every instant,
// forwards and backwards in time, on a fire time exactly, and through daylight-saving changes.
import t from 'tap'
import { cronOf, nextRuns } from '../../src/automations/cron.js'

const SCHEDULES = [
  { cron: '30 2 * * *', timezone: 'Europe/Berlin' },
  { cron: '*/15 * * * *', timezone: 'Europe/Berlin' },
  { cron: '0 9 * * 1-5', timezone: 'America/New_York' },
  { cron: '15 1-3 * * *', timezone: 'Australia/Lord_Howe' },
  { cron: '@daily', timezone: 'UTC' },
  { cron: '0 0 29 2 *', timezone: 'Asia/Tokyo' }
]
const iso = (ds: Date[]) => ds.map((d) => d.toISOString())
const croner = (s: (typeof SCHEDULES)[number], from: Date) => iso(cronOf(s).nextRuns(5, from))

t.test('the remembered next five equal croner at every instant, forwards and back', async (t) => {
  let checked = 0
  for (const s of SCHEDULES) {
    // 2026-03-28 to 2026-04-06 (spring changes in Europe and Lord Howe's autumn one), every 7 minutes
    const start = Date.parse('2026-03-28T00:00:00Z')
    const instants: number[] = []
    for (let at = start; at < start + 9 * 86_400_000; at += 7 * 60_000) instants.push(at)
    for (const at of [...instants, ...instants.reverse()]) {
      const from = new Date(at)
      if (iso(nextRuns(s, from, 5)).join() !== croner(s, from).join()) {
        t.fail(`${s.cron} in ${s.timezone} from ${from.toISOString()}`)
        return
      }
      checked++
    }
  }
  t.ok(checked > 10_000, `${checked} instants agree`)
})

t.test('on a fire time exactly, and a caller changing the answer changes nothing remembered', async (t) => {
  const s = { cron: '0 12 * * *', timezone: 'UTC' }
  const before = nextRuns(s, new Date('2026-05-01T11:00:00Z'), 5)
  t.equal(before[0]!.toISOString(), '2026-05-01T12:00:00.000Z')
  before.length = 0
  t.same(iso(nextRuns(s, new Date('2026-05-01T11:30:00Z'), 5)), croner(s, new Date('2026-05-01T11:30:00Z')))
  // at the fire time itself it is no longer next (strictly after)
  const at = new Date('2026-05-01T12:00:00Z')
  t.equal(nextRuns(s, at, 5)[0]!.toISOString(), '2026-05-02T12:00:00.000Z')
  t.same(iso(nextRuns(s, at, 5)), croner(s, at))
  t.same(iso(nextRuns(s, at, 2)), croner(s, at).slice(0, 2), 'another count is its own answer')
})
