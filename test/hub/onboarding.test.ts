// The console for a new team, in a real Chromium: sign up, create an organization (a person
// without one is led there, never shown an error), add a member by email, switch between
// organizations, sign out and in again.
import t, { type Test } from 'tap'
import { signUp } from '../helper.js'
import { hubServer, launchBrowser, noBrowser, openPage, screenshot } from './helpers.js'

const { app, base } = await hubServer(t, {})
const test = (name: string, fn: (t: Test) => Promise<void>) => t.test(name, { skip: noBrowser }, fn)
const browser = noBrowser ? (null as never) : await launchBrowser(t)

test('sign up, create an organization, add a member, switch, sign out and in', async (t) => {
  const colleague = await signUp(app, { email: 'sam@example.test', name: 'Sam' })
  const { page, problems, close } = await openPage(browser)
  t.teardown(close)
  await page.goto(`${base}/hub/sign-in`)
  await page.getByRole('link', { name: 'Create an account' }).first().click()
  await page.getByRole('heading', { name: 'Create an account' }).waitFor()
  await page.getByLabel('Name').fill('Priya')
  await page.getByLabel('Email').fill('priya@example.test')
  await page.getByLabel(/Password/).fill('correct horse battery')
  const signedUp = page.waitForResponse((r) => r.url().endsWith('/api/auth/sign-up'))
  await page.getByRole('button', { name: 'Create account' }).click()
  t.equal((await signedUp).status(), 201)

  // no organization yet: led to create one, no error anywhere
  await page.getByRole('heading', { name: 'Welcome to Cairn' }).waitFor()
  t.equal(await page.getByRole('alert').count(), 0, 'no error shown')
  // the page acted as the dev org before: nothing drawn for it is sent with the new session
  t.same(
    problems.everyError.filter((e) => /no_organization|^4\d\d /.test(e)),
    [],
    'no request the server refuses, no no_organization in the console'
  )
  await screenshot(page, 'onboarding-no-org')
  await page.getByLabel('Organization name').fill('Platform team')
  const created = page.waitForResponse(
    (r) => r.url().endsWith('/api/auth/organizations') && r.request().method() === 'POST'
  )
  await page.getByRole('button', { name: 'Create organization' }).click()
  t.equal((await created).status(), 201)
  await page.getByRole('heading', { name: 'Browse memory' }).waitFor()
  await page.getByText('The organization pool is empty.').waitFor()

  // add a member by email; an unknown email says what to do
  await page.getByRole('link', { name: 'Organization', exact: true }).click()
  await page.getByRole('heading', { name: 'Platform team' }).waitFor()
  await page.getByLabel('Email of a person who has an account').fill('nobody@example.test')
  await page.getByRole('button', { name: 'Add member' }).click()
  await page.getByRole('alert').filter({ hasText: 'Nobody has an account with that email yet' }).waitFor()
  await page.getByLabel('Email of a person who has an account').fill('sam@example.test')
  const added = page.waitForResponse((r) => /\/members$/.test(r.url()))
  await page.getByRole('button', { name: 'Add member' }).click()
  t.equal((await added).status(), 201)
  await page.getByRole('status').filter({ hasText: 'Added sam@example.test to Platform team.' }).waitFor()
  await screenshot(page, 'onboarding-organization')

  // a second organization, then switch back through the picker
  await page.getByLabel('Organization name').fill('Side project')
  await page.getByRole('button', { name: 'Create organization' }).click()
  await page.getByRole('heading', { name: 'Side project' }).waitFor()
  const switched = page.waitForResponse((r) => r.url().endsWith('/api/auth/organizations/active'))
  await page.getByRole('combobox', { name: /^Organization/ }).selectOption({ label: 'Platform team' })
  t.equal((await switched).status(), 200)
  await page.getByRole('heading', { name: 'Platform team' }).waitFor()

  // sign out; the colleague signs in and is in the team
  await page.getByRole('button', { name: 'Sign out' }).click()
  await page.getByRole('heading', { name: 'Sign in' }).waitFor()
  await page.getByLabel('Email').fill('sam@example.test')
  await page.getByLabel('Password').fill(colleague.password)
  await page.getByRole('button', { name: 'Sign in' }).click()
  await page.getByRole('heading', { name: 'Browse memory' }).waitFor()
  await page.getByRole('link', { name: 'Organization', exact: true }).click()
  await page.getByRole('heading', { name: 'Platform team' }).waitFor()
  await page.getByText('You are its member.').waitFor()
  await page.getByText('Only owners and admins can add members.').waitFor()
  t.same(problems.errors, [])
  t.same(await problems.violations(), [])
})
