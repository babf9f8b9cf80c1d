// @joplin/turndown-plugin-gfm ships no types: the one export we use.
declare module '@joplin/turndown-plugin-gfm' {
  import type TurndownService from 'turndown'
  export const gfm: TurndownService.Plugin
}
