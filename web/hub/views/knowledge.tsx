/** Knowledge: a page to come (its route and navigation entry are in main.tsx). */
export function KnowledgeView() {
  return (
    <section aria-labelledby="knowledge-title">
      <h1 id="knowledge-title">Knowledge</h1>
      <p class="muted">This page is not built yet.</p>
    </section>
  )
}
