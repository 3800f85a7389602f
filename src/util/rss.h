/* util/rss.h - this process's resident memory as Linux reports it (/proc/self/status): now and
 * its high-water mark, in bytes; 0 where the system does not say. */
#ifndef DT_RSS_H
#define DT_RSS_H

#include <stddef.h>

/* VmRSS: the resident bytes now. */
size_t dt_rss_now(void);
/* VmHWM: the most resident bytes so far (getrusage's ru_maxrss where /proc has none). */
size_t dt_rss_peak(void);

/* Starts the high-water mark again from the resident bytes now (Linux: 5 > clear_refs); after a
 * phase whose peak is reported apart (the planner's measurements). 0, or -1 where it cannot. */
int dt_rss_reset_peak(void);

#endif
