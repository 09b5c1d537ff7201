import type { IncomingMessage, ServerResponse } from 'node:http';
import { Controller, Get, Req, Res } from '@nestjs/common';
import { prometheus } from './metrics';

/** GET /metrics: every series of docs/observability.md, in Prometheus' text format. */
@Controller('metrics')
export class MetricsController {
  @Get()
  scrape(@Req() request: IncomingMessage, @Res() response: ServerResponse): void {
    prometheus.getMetricsRequestHandler(request, response);
  }
}
