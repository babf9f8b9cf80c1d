import t from 'tap'
import { systemClock } from '../../src/worker-loop.js'
import { signUpWithOrg } from '../helper.js'
import { buildAutomationsApp, QUIET } from './group.js'

t.test('each kind of target comes back as it was sent (the response schema is a union)', async (t) => {
  const app = await buildAutomationsApp(t, {
    clock: systemClock,
    env: QUIET
  })
  const owner = await signUpWithOrg(app)
  const headers = { cookie: owner.cookie }
  const skill = (
    await app.inject({
      method: 'POST',
      url: '/api/skills',
      headers,
      payload: { name: 'one', description: 'One', instructions: 'Do one.' }
    })
  ).json().skill
  const playbook = (
    await app.inject({
      method: 'POST',
      url: '/api/playbooks',
      headers,
      payload: { name: 'P', steps: [{ skillId: skill.id }] }
    })
  ).json().playbook
  for (const target of [
    { prompt: 'hello', engine: 'echo', model: 'echo' },
    { prompt: 'bare' },
    { skillId: skill.id, input: 'x' },
    { skillId: skill.id },
    { playbookId: playbook.id, input: 'y' }
  ]) {
    const res = await app.inject({
      method: 'POST',
      url: '/api/automations',
      headers,
      payload: { name: 'n', cron: '@daily', target }
    })
    t.equal(res.statusCode, 201, res.body)
    t.same(res.json().automation.target, target)
    const read = await app.inject({ method: 'GET', url: `/api/automations/${res.json().automation.id}`, headers })
    t.same(read.json().automation.target, target)
  }
})
