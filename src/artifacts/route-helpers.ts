import { notFound } from '../../plugins/errors.js'
import type { Db } from '../db/client.js'
import { getArtifact } from './artifacts-repo.js'

/** The ETag of an artifact's version: `"v<n>"`. */
export const versionTag = (version: number) => `"v${version}"`

/** The artifact, or a 404 when the organization has none with this id. */
export async function artifactOf(db: Db, orgId: string, id: string) {
  const artifact = await getArtifact(db, orgId, id)
  if (!artifact) throw notFound('no such artifact in this organization')
  return artifact
}
