import { Type } from 'typebox'
import {
  CreatedBy,
  Id,
  IdParams,
  IsoDate,
  LiteralUnion,
  named,
  Nullable,
  Page,
  PageQuery,
  StrictObject
} from './common.js'

const Sha256 = Type.String({ pattern: '^[0-9a-f]{64}$', description: 'SHA-256 of the bytes, hex' })
/** A file name as people write them: any printable characters, no control characters. */
const Name = Type.String({ minLength: 1, maxLength: 255, pattern: '^[^\\u0000-\\u001f\\u007f]+$' })
const MediaType = Type.String({ minLength: 3, maxLength: 255, description: 'a media type such as text/markdown' })

export const Upload = named(
  'Upload',
  Type.Object({
    id: Type.String(),
    name: Type.String(),
    size: Type.Integer(),
    contentType: Type.String(),
    sha256: Sha256,
    createdAt: IsoDate,
    createdBy: CreatedBy
  })
)

export const Artifact = named(
  'Artifact',
  Type.Object({
    id: Type.String(),
    runId: Nullable(Type.String()),
    rootRunId: Nullable(Type.String()),
    name: Type.String(),
    contentType: Type.String(),
    size: Type.Integer(),
    sha256: Sha256,
    version: Type.Integer({ minimum: 1 }),
    createdAt: IsoDate,
    updatedAt: IsoDate,
    createdBy: CreatedBy
  })
)

export const VERSION_SOURCES = ['run', 'api', 'edit', 'proposal'] as const
export const PROPOSAL_STATES = ['open', 'accepted', 'rejected'] as const
export const VersionSource = LiteralUnion(VERSION_SOURCES)
export const ArtifactVersion = named(
  'ArtifactVersion',
  Type.Object({
    version: Type.Integer({ minimum: 1 }),
    size: Type.Integer(),
    sha256: Sha256,
    contentType: Type.String(),
    source: VersionSource,
    runId: Nullable(Type.String()),
    createdAt: IsoDate,
    createdBy: CreatedBy
  })
)

export const ProposalState = LiteralUnion(PROPOSAL_STATES)
export const Proposal = named(
  'ArtifactProposal',
  Type.Object({
    id: Type.String(),
    artifactId: Type.String(),
    baseVersion: Type.Integer({ minimum: 1 }),
    summary: Nullable(Type.String()),
    state: ProposalState,
    runId: Nullable(Type.String()),
    createdAt: IsoDate,
    createdBy: CreatedBy,
    decidedAt: Nullable(IsoDate),
    decidedBy: Nullable(Type.String())
  })
)

export const UploadEnvelope = named('UploadEnvelope', Type.Object({ upload: Upload }))
export const ArtifactEnvelope = named('ArtifactEnvelope', Type.Object({ artifact: Artifact }))
export const ProposalEnvelope = named('ProposalEnvelope', Type.Object({ proposal: Proposal }))
export const AcceptedProposal = named('AcceptedProposal', Type.Object({ artifact: Artifact, proposal: Proposal }))
export const UploadPage = named('UploadPage', Page(Upload))
export const ArtifactPage = named('ArtifactPage', Page(Artifact))
export const VersionPage = named('ArtifactVersionPage', Page(ArtifactVersion))
export const ProposalPage = named('ArtifactProposalPage', Page(Proposal))

export const CreateTextArtifact = named(
  'CreateTextArtifactRequest',
  StrictObject({
    name: Name,
    content: Type.String({ description: 'the text, stored as UTF-8' }),
    contentType: Type.Optional(MediaType),
    runId: Type.Optional(Id)
  })
)
export const CreateArtifactFromUpload = named(
  'CreateArtifactFromUploadRequest',
  StrictObject({
    name: Name,
    uploadId: Id,
    runId: Type.Optional(Id)
  })
)
export const CreateArtifactBody = Type.Union([CreateTextArtifact, CreateArtifactFromUpload])

export const CreateProposalBody = named(
  'CreateProposalRequest',
  StrictObject({
    content: Type.String(),
    baseVersion: Type.Integer({ minimum: 1 }),
    summary: Type.Optional(Type.String({ maxLength: 2000 }))
  })
)

export { IdParams }
export const VersionParams = StrictObject({ id: Id, version: Type.Integer({ minimum: 1, maximum: 2_147_483_647 }) })
export const ProposalParams = StrictObject({ id: Id, pid: Id })

export const ListUploadsQuery = StrictObject({ ...PageQuery })
export const ListArtifactsQuery = StrictObject({ ...PageQuery, runId: Type.Optional(Id), rootRunId: Type.Optional(Id) })
export const ListVersionsQuery = StrictObject({ ...PageQuery })
export const ListProposalsQuery = StrictObject({ ...PageQuery, state: Type.Optional(ProposalState) })

/** The bytes of an upload or artifact version, with their stored Content-Type (206 for a Range). */
export function ContentResponse(description: string) {
  return { description, content: { '*/*': { schema: Type.String({ format: 'binary' }) } } }
}
export const ContentHeaders = Type.Object({
  range: Type.Optional(
    Type.String({ maxLength: 200, description: 'one byte range (`bytes=0-99`); several are answered whole' })
  ),
  'if-range': Type.Optional(Type.String({ maxLength: 200 })),
  'if-none-match': Type.Optional(Type.String({ maxLength: 2000 }))
})
export const IfMatchHeaders = Type.Object({
  'if-match': Type.Optional(
    Type.String({ maxLength: 200, description: 'the ETag of the version this write replaces (required)' })
  )
})
export const DiffResponse = {
  description: 'a unified diff of the proposal against its base version',
  content: { 'text/plain': { schema: Type.String() } }
}
/** `POST /api/uploads`: one multipart field `file` (documented; the body is read as a stream). */
export const UploadRequestBody = named(
  'UploadRequest',
  Type.Object({
    file: Type.String({
      format: 'binary',
      contentMediaType: 'application/octet-stream',
      description: 'the file; its part Content-Type is the declared type'
    })
  })
)
