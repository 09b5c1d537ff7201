import { metrics } from '@opentelemetry/api';
import { PrometheusExporter } from '@opentelemetry/exporter-prometheus';
import { MeterProvider } from '@opentelemetry/sdk-metrics';

/**
 * The demo's OpenTelemetry meter provider, read by Prometheus at GET /metrics (MetricsController).
 * Registered before the application module loads: members take their instruments when they start,
 * and a meter taken before a provider is registered stays a no-op (docs/observability.md).
 */
export const prometheus = new PrometheusExporter({ preventServerStart: true });

export function registerMetrics(): void {
  metrics.setGlobalMeterProvider(new MeterProvider({ readers: [prometheus] }));
}
