// Time-indexed rows for the charts, bounded in time and in count so that a tab left open
// for a day holds the same memory as one opened a minute ago. Rows are keyed by time (unix
// seconds): a point received twice (live, then again in a backfill) merges into one row.

export class TimeRows {
  constructor({ windowS, maxRows }) {
    this.windowS = windowS;
    this.maxRows = maxRows;
    this.times = [];
    this.rows = new Map();
  }

  upsert(t, fields) {
    const row = this.rows.get(t);
    if (row) {
      Object.assign(row, fields);
      return;
    }
    this.rows.set(t, { ...fields });
    const last = this.times.length ? this.times[this.times.length - 1] : -Infinity;
    if (t > last) {
      this.times.push(t);
    } else {
      let low = 0;
      let high = this.times.length;
      while (low < high) {
        const mid = (low + high) >> 1;
        if (this.times[mid] < t) low = mid + 1;
        else high = mid;
      }
      this.times.splice(low, 0, t);
    }
    this.trim();
  }

  trim() {
    const newest = this.times.length ? this.times[this.times.length - 1] : 0;
    let drop = 0;
    while (drop < this.times.length && (this.times[drop] < newest - this.windowS || this.times.length - drop > this.maxRows)) {
      this.rows.delete(this.times[drop]);
      drop += 1;
    }
    if (drop) this.times.splice(0, drop);
  }

  get last() {
    return this.times.length ? this.rows.get(this.times[this.times.length - 1]) : null;
  }

  // uPlot's data: [times, column for each field], null where a row lacks the field.
  table(fields) {
    const columns = fields.map((field) => this.times.map((t) => {
      const value = this.rows.get(t)[field];
      return value === undefined ? null : value;
    }));
    return [this.times.slice(), ...columns];
  }
}

export function seconds(iso) {
  return Date.parse(iso) / 1000;
}
