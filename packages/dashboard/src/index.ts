export {
  createDashboard,
  Dashboard,
  type DashboardEvents,
  type DashboardStats,
  MAX_LIVE_CONNECTIONS,
  MAX_WATCHED_GROUPS,
} from './dashboard';
export { LIVE_STALL_MS, MAX_LIVE_BACKLOG_BYTES } from './live-connection';
export type {
  DashboardAccess,
  DashboardGuard,
  DashboardListener,
  DashboardListeners,
  DashboardLocalMember,
  DashboardOptions,
} from './dashboard-options';
export type { DashboardActionResult } from './actions';
export type { GroupView, LagPoint, MemberView } from './group-watch';
export type { GroupSummary, Overview, StreamSummary } from './overview';
export { CSRF_COOKIE, CSRF_HEADER } from './csrf';
