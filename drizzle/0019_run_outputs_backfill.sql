-- A succeeded run's answer was kept only in its message.completed event: copy it onto the run
-- while that event still exists (events are pruned after their retention).
UPDATE "runs" SET "output" = (
  SELECT e."data"->>'text' FROM "run_events" e
  WHERE e."run_id" = "runs"."id" AND e."type" = 'message.completed'
  ORDER BY e."id" DESC LIMIT 1
)
WHERE "status" = 'succeeded' AND "output" IS NULL;
