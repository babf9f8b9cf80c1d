export const root: string
export function sourceHash(): string
export function ensureBuild(options?: { log?: (line: string) => void }): string
export function ensurePgliteTemplate(options?: { log?: (line: string) => void }): Promise<string | null>
