import { ConfigurableModuleBuilder } from '@nestjs/common';
import type { CoordinatorDashboardModuleOptions } from './dashboard-module-options';

/** The injection token of the module's options. */
export const COORDINATOR_DASHBOARD_OPTIONS = Symbol('rsc:dashboard-options');

export const { ConfigurableModuleClass, OPTIONS_TYPE, ASYNC_OPTIONS_TYPE } =
  new ConfigurableModuleBuilder<CoordinatorDashboardModuleOptions>({
    optionsInjectionToken: COORDINATOR_DASHBOARD_OPTIONS,
  })
    .setClassMethodName('forRoot')
    .build();
