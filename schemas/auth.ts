import { Type } from 'typebox'
import { PASSWORD_MAX, PASSWORD_MIN } from '../src/auth/passwords.js'
import { Id, IsoDate, LiteralUnion, named, Nullable, StrictObject } from './common.js'

export const RoleSchema = named(
  'Role',
  Type.Union([Type.Literal('owner'), Type.Literal('admin'), Type.Literal('member')])
)
const Email = Type.String({ format: 'email', minLength: 3, maxLength: 254, description: 'compared case-insensitively' })
/** 8 to 256 characters, used whole (no truncation); a longer one is refused before any hashing. */
const Password = Type.String({ minLength: PASSWORD_MIN, maxLength: PASSWORD_MAX })
const Name = Type.String({ minLength: 1, maxLength: 100 })
export const Slug = Type.String({ minLength: 1, maxLength: 48, pattern: '^[a-z0-9](?:[a-z0-9-]*[a-z0-9])?$' })

export const User = named(
  'User',
  Type.Object({ id: Type.String(), email: Type.String(), name: Type.String(), createdAt: IsoDate })
)
export const OrganizationSummary = named(
  'OrganizationSummary',
  Type.Object({ id: Type.String(), name: Type.String(), slug: Type.String(), role: RoleSchema })
)
export const Organization = named(
  'Organization',
  Type.Object({
    id: Type.String(),
    name: Type.String(),
    slug: Type.String(),
    role: RoleSchema,
    createdAt: IsoDate
  })
)
export const Member = named(
  'Member',
  Type.Object({
    organizationId: Type.String(),
    userId: Type.String(),
    email: Type.String(),
    name: Type.String(),
    role: RoleSchema,
    createdAt: IsoDate
  })
)

export const SignUpBody = named('SignUpRequest', StrictObject({ email: Email, password: Password, name: Name }))
export const SignInBody = named('SignInRequest', StrictObject({ email: Email, password: Password }))
export const UserReply = named('UserReply', Type.Object({ user: User }))
const SessionTimes = Type.Object({ expiresAt: IsoDate, activeOrganizationId: Type.Union([Type.String(), Type.Null()]) })
export const SessionReply = named(
  'SessionReply',
  Type.Object({
    user: User,
    session: SessionTimes,
    organizations: Type.Array(OrganizationSummary)
  })
)

/** Who the browser acts as: a signed-in person, the dev org of this machine, or nobody. */
export const CALLER_KINDS = ['user', 'dev', 'anonymous'] as const
export const WhoAmIReply = named(
  'WhoAmI',
  Type.Object(
    {
      kind: LiteralUnion(CALLER_KINDS, {
        description:
          'user: a live session (then user, session and organizations are those of GET /api/auth/session); dev: no session cookie and this caller acts in the dev org (ALLOW_DEV_ORG, loopback); anonymous: neither (a dead session cookie is cleared and is anonymous, never the dev org)'
      }),
      user: Nullable(User),
      session: Nullable(SessionTimes),
      organizations: Type.Array(OrganizationSummary)
    },
    {
      description:
        'who this browser acts as: 200 with or without a session, unlike GET /api/auth/session (a bearer header is refused, as there)'
    }
  )
)

export const CreateOrganizationBody = named(
  'CreateOrganizationRequest',
  StrictObject({ name: Name, slug: Type.Optional(Slug) })
)
export const OrganizationReply = named('OrganizationReply', Type.Object({ organization: Organization }))
export const OrganizationsReply = named(
  'OrganizationList',
  Type.Object({ organizations: Type.Array(OrganizationSummary) })
)
export const ActiveOrganizationBody = named('ActiveOrganizationRequest', StrictObject({ organizationId: Id }))
export const ActiveOrganizationReply = named(
  'ActiveOrganizationReply',
  Type.Object({ activeOrganizationId: Type.String() })
)

export const OrgParams = StrictObject({ orgId: Id })
export const MemberParams = StrictObject({ orgId: Id, userId: Id })
export const AddMemberBody = named('AddMemberRequest', StrictObject({ email: Email, role: RoleSchema }))
export const ChangeRoleBody = named('ChangeRoleRequest', StrictObject({ role: RoleSchema }))
export const MemberReply = named('MemberReply', Type.Object({ member: Member }))
export const MemberList = named('MemberList', Type.Object({ items: Type.Array(Member) }))

export const MintKeyBody = named('MintKeyRequest', StrictObject({ name: Name }))
export const MintedKey = named(
  'MintedKey',
  Type.Object({
    id: Type.String(),
    name: Type.String(),
    key: Type.String({ description: 'the key itself: shown here once, never again' }),
    last4: Type.String(),
    createdAt: IsoDate
  })
)
export const ApiKey = named(
  'ApiKey',
  Type.Object({
    id: Type.String(),
    name: Type.String(),
    last4: Type.String(),
    createdAt: IsoDate,
    lastUsedAt: Type.Union([IsoDate, Type.Null()]),
    revokedAt: Type.Union([IsoDate, Type.Null()]),
    createdBy: Type.Union([Type.String(), Type.Null()])
  })
)
export const ApiKeyList = named('ApiKeyList', Type.Object({ items: Type.Array(ApiKey) }))
export const KeyParams = StrictObject({ id: Id })
