export const root: string
export function sourceHash(): string
export function ensureBuild(options?: { log?: (line: string) => void }): string
