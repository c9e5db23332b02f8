// Package storeinfo reads what postroom's tables hold for the bus's
// gauges, the console and the postroom command: the inbox and watermark
// tables' rows and oldest row ([Stats]), the inbox per consumer
// ([InboxSummary]), the delayed messages ([ListDelayed],
// [DelayedSummary]), and how far a process's clock is off its database's
// ([ClockSkew]), which the scheduler checks at start.
package storeinfo
