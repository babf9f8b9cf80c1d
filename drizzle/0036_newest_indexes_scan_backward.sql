DROP INDEX "memory_captures_org_newest_idx";--> statement-breakpoint
DROP INDEX "memory_items_pool_newest_idx";--> statement-breakpoint
DROP INDEX "memory_recalls_org_newest_idx";--> statement-breakpoint
DROP INDEX "memory_recalls_run_idx";--> statement-breakpoint
DROP INDEX "memory_recalls_root_idx";--> statement-breakpoint
CREATE INDEX "memory_captures_org_newest_idx" ON "memory_captures" USING btree ("org_id","id");--> statement-breakpoint
CREATE INDEX "memory_items_pool_newest_idx" ON "memory_items" USING btree ("org_id","pool_id","id");--> statement-breakpoint
CREATE INDEX "memory_recalls_org_newest_idx" ON "memory_recalls" USING btree ("org_id","id");--> statement-breakpoint
CREATE INDEX "memory_recalls_run_idx" ON "memory_recalls" USING btree ("org_id","run_id","id");--> statement-breakpoint
CREATE INDEX "memory_recalls_root_idx" ON "memory_recalls" USING btree ("org_id","root_run_id","id");