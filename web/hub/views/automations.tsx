/** Automations: a page to come (its route and navigation entry are in main.tsx). */
export function AutomationsView() {
  return (
    <section aria-labelledby="automations-title">
      <h1 id="automations-title">Automations</h1>
      <p class="muted">This page is not built yet.</p>
    </section>
  )
}
