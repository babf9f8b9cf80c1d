/** Skills: a page to come (its route and navigation entry are in main.tsx). */
export function SkillsView() {
  return (
    <section aria-labelledby="skills-title">
      <h1 id="skills-title">Skills</h1>
      <p class="muted">This page is not built yet.</p>
    </section>
  )
}
