import { Type, type Static } from 'typebox'
import { IsoDate, LiteralUnion, named, Nullable, Page, PageQuery, StrictObject } from './common.js'

export const PULL_STATES = ['open', 'closed', 'all'] as const

/** A GitHub login (user or organization): what GitHub allows. */
const OwnerName = Type.String({
  minLength: 1,
  maxLength: 39,
  pattern: '^[A-Za-z0-9](?:[A-Za-z0-9-]{0,38})$',
  description: 'a GitHub user or organization'
})
/** A repository name as GitHub allows it (never `.` or `..`). */
const RepoName = Type.String({
  minLength: 1,
  maxLength: 100,
  pattern: '^(?!\\.\\.?$)[A-Za-z0-9._-]{1,100}$',
  description: 'a repository name'
})
/** `owner/name`. */
export const RepoFullName = Type.String({
  minLength: 3,
  maxLength: 140,
  pattern: '^[A-Za-z0-9](?:[A-Za-z0-9-]{0,38})/(?!\\.\\.?$)[A-Za-z0-9._-]{1,100}$',
  description: 'the repository as `owner/name`'
})
/** A branch, tag or commit SHA (checked further in the handler: no `..`). */
const GitRef = Type.String({
  minLength: 1,
  maxLength: 255,
  pattern: '^[^\\s~^:?*\\[\\\\\\x00-\\x1f\\x7f]+$',
  description: 'a branch, a tag or a commit SHA; default: the default branch'
})

export const ConnectGitHubBody = named(
  'ConnectGitHubRequest',
  StrictObject({
    token: Type.String({
      minLength: 1,
      maxLength: 1024,
      pattern: '^[\\x21-\\x7e]+$',
      description:
        'a GitHub personal access token (classic or fine-grained) or an app token; checked against GitHub before it is kept, sealed, never returned'
    })
  })
)

export const GitHubRepo = named(
  'GitHubRepo',
  Type.Object(
    {
      id: Type.String({ description: "GitHub's id of the repository" }),
      fullName: Type.String({ description: '`owner/name`' }),
      owner: Type.String(),
      name: Type.String(),
      private: Type.Boolean(),
      defaultBranch: Type.String(),
      description: Nullable(Type.String()),
      htmlUrl: Type.String(),
      updatedAt: Nullable(IsoDate)
    },
    { description: 'a repository the connected token can read' }
  )
)

export const GitHubPull = named(
  'GitHubPullRequest',
  Type.Object(
    {
      id: Type.String({ description: "GitHub's id of the pull request" }),
      number: Type.Integer(),
      title: Type.String(),
      state: LiteralUnion(['open', 'closed'] as const),
      draft: Type.Boolean(),
      merged: Type.Boolean(),
      author: Nullable(Type.String({ description: 'the login that opened it' })),
      headRef: Type.String(),
      baseRef: Type.String(),
      htmlUrl: Type.String(),
      createdAt: IsoDate,
      updatedAt: IsoDate,
      closedAt: Nullable(IsoDate),
      mergedAt: Nullable(IsoDate)
    },
    { description: 'a pull request of a repository' }
  )
)

export type GitHubRepoWire = Static<typeof GitHubRepo>
export type GitHubPullWire = Static<typeof GitHubPull>

export const GitHubRepoPage = named('GitHubRepoPage', Page(GitHubRepo))
export const GitHubPullPage = named('GitHubPullRequestPage', Page(GitHubPull))

export const ListGitHubReposQuery = StrictObject({ ...PageQuery })
export const ListPullsQuery = StrictObject({
  ...PageQuery,
  state: Type.Optional(LiteralUnion(PULL_STATES, { description: 'default open' }))
})
export const PullsParams = StrictObject({ owner: OwnerName, repo: RepoName })

export const ImportSkillBody = named(
  'ImportSkillRequest',
  StrictObject({
    repo: RepoFullName,
    path: Type.String({
      maxLength: 1024,
      description:
        "the skill's folder in the repository (its SKILL.md is read), or the SKILL.md itself; empty: the root"
    }),
    ref: Type.Optional(GitRef)
  })
)

export const BuildWikiBody = named(
  'BuildRepoWikiRequest',
  StrictObject({
    repo: RepoFullName,
    ref: Type.Optional(GitRef),
    engine: Type.Optional(
      Type.String({
        minLength: 1,
        maxLength: 64,
        pattern: '^[a-z0-9_-]+$',
        description: "default: the first ready model's engine, else echo"
      })
    ),
    model: Type.Optional(Type.String({ minLength: 1, maxLength: 200 }))
  })
)
