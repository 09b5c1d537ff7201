import { BadRequestException, Injectable, type PipeTransform } from '@nestjs/common';
import type { Summary } from './summary';

/**
 * Rejects a payload that is not a Summary. In a stream handler the rejection fails the attempt, so
 * the entry is retried and then dead-lettered with "BadRequestException: …" as its reason.
 */
@Injectable()
export class SummaryValidationPipe implements PipeTransform<unknown, Summary> {
  transform(value: unknown): Summary {
    const summary = value as Partial<Summary> | null;
    for (const field of ['userId', 'text', 'at'] as const) {
      if (typeof summary?.[field] !== 'string')
        throw new BadRequestException(`a summary needs a string ${field}, got ${JSON.stringify(summary?.[field])}`);
    }
    return summary as Summary;
  }
}
