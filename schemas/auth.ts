import { Type } from 'typebox'
import { PASSWORD_MAX, PASSWORD_MIN } from '../src/auth/passwords.js'
import { Id, IsoDate, StrictObject } from './common.js'

export const RoleSchema = Type.Union([Type.Literal('owner'), Type.Literal('admin'), Type.Literal('member')])
const Email = Type.String({ format: 'email', minLength: 3, maxLength: 254, description: 'compared case-insensitively' })
/** 8 to 256 characters, used whole (no truncation); a longer one is refused before any hashing. */
const Password = Type.String({ minLength: PASSWORD_MIN, maxLength: PASSWORD_MAX })
const Name = Type.String({ minLength: 1, maxLength: 100 })
export const Slug = Type.String({ minLength: 1, maxLength: 48, pattern: '^[a-z0-9](?:[a-z0-9-]*[a-z0-9])?$' })

export const User = Type.Object({ id: Type.String(), email: Type.String(), name: Type.String(), createdAt: IsoDate })
export const OrganizationSummary = Type.Object({ id: Type.String(), name: Type.String(), slug: Type.String(), role: RoleSchema })
export const Organization = Type.Object({
  id: Type.String(), name: Type.String(), slug: Type.String(), role: RoleSchema, createdAt: IsoDate
})
export const Member = Type.Object({
  organizationId: Type.String(), userId: Type.String(), email: Type.String(), name: Type.String(), role: RoleSchema, createdAt: IsoDate
})

export const SignUpBody = StrictObject({ email: Email, password: Password, name: Name })
export const SignInBody = StrictObject({ email: Email, password: Password })
export const UserReply = Type.Object({ user: User })
export const SessionReply = Type.Object({
  user: User,
  session: Type.Object({ expiresAt: IsoDate, activeOrganizationId: Type.Union([Type.String(), Type.Null()]) }),
  organizations: Type.Array(OrganizationSummary)
})

export const CreateOrganizationBody = StrictObject({ name: Name, slug: Type.Optional(Slug) })
export const OrganizationReply = Type.Object({ organization: Organization })
export const OrganizationsReply = Type.Object({ organizations: Type.Array(OrganizationSummary) })
export const ActiveOrganizationBody = StrictObject({ organizationId: Id })
export const ActiveOrganizationReply = Type.Object({ activeOrganizationId: Type.String() })

export const OrgParams = StrictObject({ orgId: Id })
export const MemberParams = StrictObject({ orgId: Id, userId: Id })
export const AddMemberBody = StrictObject({ email: Email, role: RoleSchema })
export const ChangeRoleBody = StrictObject({ role: RoleSchema })
export const MemberReply = Type.Object({ member: Member })

export const MintKeyBody = StrictObject({ name: Name })
export const MintedKey = Type.Object({
  id: Type.String(), name: Type.String(),
  key: Type.String({ description: 'the key itself: shown here once, never again' }),
  last4: Type.String(), createdAt: IsoDate
})
export const ApiKey = Type.Object({
  id: Type.String(), name: Type.String(), last4: Type.String(), createdAt: IsoDate,
  lastUsedAt: Type.Union([IsoDate, Type.Null()]), revokedAt: Type.Union([IsoDate, Type.Null()]),
  createdBy: Type.Union([Type.String(), Type.Null()])
})
export const ApiKeyList = Type.Object({ items: Type.Array(ApiKey) })
export const KeyParams = StrictObject({ id: Id })
