export { createDashboard, Dashboard, type DashboardEvents, type DashboardStats } from './dashboard';
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
