import stopword from 'stopword'
import { wordsOf } from './words.js'

// What a run's recall searches for: the prompt's significant words, not its first few.

/** English stop words (the `stopword` package's list) and the filler of prompts to an agent. */
const STOP_WORDS = new Set([
  ...stopword.eng,
  'please',
  'thanks',
  'thank',
  'hello',
  'could',
  'would',
  'should',
  'can',
  'will',
  'also',
  'just',
  'like',
  'know',
  'tell',
  'want',
  'need',
  'make',
  'let',
  'get',
  'got',
  'use',
  'using',
  'used',
  'say',
  'said',
  'does',
  'did',
  'done',
  'doing',
  'our',
  'ours',
  'your',
  'yours',
  'mine',
  'their',
  'theirs',
  'its',
  'what',
  'which',
  'who',
  'whom',
  'whose',
  'when',
  'where',
  'why',
  'how',
  'this',
  'that',
  'these',
  'those',
  'there',
  'here',
  'then',
  'than',
  'some',
  'any',
  'all',
  'each',
  'every',
  'much',
  'many',
  'more',
  'most',
  'very',
  'really',
  'one',
  'two',
  'yes',
  'okay',
  'sure',
  'remember',
  'recall'
])

/** How many words a recall searches for, at most. */
export const RECALL_WORDS = 16

/**
 * The prompt's significant words, most significant first: lower-cased words of at least
 * three characters (or with a digit), stop words out, ranked by how often the prompt says
 * them, then by length (a longer word is rarer, so it tells more), then by first use.
 */
export function significantWords(text: string, max = RECALL_WORDS): string[] {
  const seen = new Map<string, { count: number; first: number }>()
  let position = 0
  for (const word of wordsOf(text)) {
    position++
    if (word.length > 32 || STOP_WORDS.has(word)) continue
    if (word.length < 3 && !/\p{N}/u.test(word)) continue
    const entry = seen.get(word)
    if (entry) entry.count++
    else seen.set(word, { count: 1, first: position })
  }
  return [...seen.entries()]
    .sort(([a, x], [b, y]) => y.count - x.count || b.length - a.length || x.first - y.first)
    .slice(0, max)
    .map(([word]) => word)
}
