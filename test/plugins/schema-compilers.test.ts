import t from 'tap'
import { Type } from 'typebox'
import { compilersFactory } from '../../plugins/schema-compilers.js'
import { buildTestApp, signUpWithOrg } from '../helper.js'

const shared = { 'cairn:id': { $id: 'cairn:id', type: 'string', minLength: 1 } }
const route = { method: 'POST', url: '/x' }

t.test('a schema compiles once per process: the same JSON gets the same function', async (t) => {
  const first = compilersFactory.buildValidator(shared)
  const second = compilersFactory.buildValidator({ ...shared })
  // equal schemas that are different objects, as two apps' route definitions are
  const body = () => Type.Object({ name: Type.String() }, { additionalProperties: false })
  const a = first({ ...route, httpPart: 'body', schema: body() })
  const b = second({ ...route, httpPart: 'body', schema: body() })
  t.equal(a, b, 'the second app reuses the first one’s body validator')
  const query = first({ ...route, httpPart: 'querystring', schema: Type.Object({ n: Type.Integer() }) })
  t.not(query, a, 'another schema gets its own')

  // body and querystring of the same schema are compiled apart: bodies are strict, queries coerced
  const numbers = () => Type.Object({ n: Type.Integer() })
  const strictBody = first({ ...route, httpPart: 'body', schema: numbers() })
  const coerced = second({ ...route, httpPart: 'querystring', schema: numbers() })
  t.not(strictBody, coerced)
  t.equal(strictBody({ n: '3' }), false, 'a body is not coerced')
  const q: { n: unknown } = { n: '3' }
  t.equal(coerced(q), true, 'a query string is')
  t.equal(q.n, 3)

  // the shared schemas are part of the key: other ones get other compilers
  const other = compilersFactory.buildValidator({ 'cairn:id': { $id: 'cairn:id', type: 'string', maxLength: 2 } })
  const ref = { type: 'object', properties: { id: { $ref: 'cairn:id' } } }
  const long = { id: 'abcdef' }
  t.equal(first({ ...route, httpPart: 'body', schema: ref })(long), true)
  t.equal(other({ ...route, httpPart: 'body', schema: { ...ref } })(long), false)
})

t.test('serializers: one per schema and shared schemas, writing only what the schema names', async (t) => {
  const make = () => Type.Object({ id: Type.String(), n: Type.Integer() })
  const one = compilersFactory.buildSerializer(undefined, undefined)({ schema: make() })
  const two = compilersFactory.buildSerializer(undefined, undefined)({ schema: make() })
  t.equal(one, two)
  t.equal(one({ id: 'a', n: 1, secret: 'x' }), '{"id":"a","n":1}')
})

t.test('apps built one after another in a process validate and answer alike', async (t) => {
  for (let i = 0; i < 2; i++) {
    const app = await buildTestApp(t)
    const owner = await signUpWithOrg(app)
    const bad = await app.inject({
      method: 'POST',
      url: '/api/runs',
      headers: { cookie: owner.cookie },
      payload: { prompt: 'hi', unknown: true }
    })
    t.equal(bad.statusCode, 400, `app ${i + 1}: an unknown body field is refused`)
    t.equal(bad.json().error, 'validation_failed')
    const listed = await app.inject({ url: '/api/runs?limit=2', headers: { cookie: owner.cookie } })
    t.equal(listed.statusCode, 200, `app ${i + 1}: a query string number is coerced`)
    const wrong = await app.inject({ url: '/api/runs?limit=many', headers: { cookie: owner.cookie } })
    t.equal(wrong.statusCode, 400)
  }
})
