/**
 * Words as the search of knowledge and of memory read them. Full-text search finds what
 * Postgres's parser makes of a text; these are the words kept beside it: a vocabulary per
 * org (knowledge) or per pool (memory) that pg_trgm matches a misspelled query word
 * against, the words a query is split into, and the significant words of a prompt.
 */

/** Lower-cased runs of letters and digits: punctuation and symbols never reach a tsquery. */
export const wordsOf = (text: string): string[] => text.toLowerCase().match(/[\p{L}\p{N}]+/gu) ?? []

/** A word worth keeping in a vocabulary: 3 to 32 characters with a letter (a bare number corrects nothing). */
export const isVocabularyWord = (word: string): boolean => word.length >= 3 && word.length <= 32 && /\p{L}/u.test(word)

/** The words of texts that go into a vocabulary, once each and sorted: concurrent writers lock them in one order. */
export function vocabulary(...texts: string[]): string[] {
  return [...new Set(texts.flatMap(wordsOf).filter(isVocabularyWord))].sort()
}
