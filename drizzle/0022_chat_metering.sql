-- A chat completion is metered like a run: the rollup's trigger function reads the same
-- columns (org_id, engine, model, user_id, status, started_at, finished_at, tokens).
CREATE TRIGGER chat_completions_usage AFTER INSERT ON "chat_completions"
  FOR EACH ROW EXECUTE FUNCTION usage_add_finished_run();
