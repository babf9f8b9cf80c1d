/** The .build/hub symlink the server reads the console from. */
export const HUB_LINK: string
export function hubSourceHash(require: NodeJS.Require): string
export function ensureHubBuild(options?: { log?: (line: string) => void }): string
