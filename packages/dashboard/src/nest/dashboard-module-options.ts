import type { DashboardGuard } from '../dashboard-options';

/** `CoordinatorDashboardModule.forRoot` options. */
export interface CoordinatorDashboardModuleOptions {
  /** Where the page lives: `/rsc` by default (outside Nest's global prefix: the page is mounted as middleware). */
  path?: string;
  /** True by default: pause, resume, replay, purge and resize are refused. */
  readOnly?: boolean;
  /**
   * Asked before every request, `(request, access) => boolean` with `access` 'read' or 'write'.
   * Required with `readOnly: false`. The page is plain middleware, so Nest guards do not run for it:
   * this is where the application's authentication goes.
   */
  guard?: DashboardGuard;
  /** The CoordinatorModule.forRoot connection (its `name`) whose Redis and key prefix to show; the unnamed one by default. */
  connection?: string;
  /** How often a watched group is read from Redis (default 2000 ms; see DashboardOptions.refreshMs). */
  refreshMs?: number;
}
