export { CoordinatorDashboardModule } from './dashboard.module';
export { CoordinatorDashboardHost } from './dashboard.host';
export { COORDINATOR_DASHBOARD_OPTIONS } from './dashboard.module-definition';
export type { CoordinatorDashboardModuleOptions } from './dashboard-module-options';
