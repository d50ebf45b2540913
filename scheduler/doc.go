// Package scheduler holds the TaskScheduler's placement policies as pure
// code: a State (the queue of waiting stage requests, the slaves' free worker
// slots, the tasks now holding slots, and the current time) goes in, a list of
// Decisions (which request starts on which slaves with how many workers) comes
// out. There are no goroutines, no I/O and no wall clock; the master applies
// the decisions and calls Schedule again whenever the state changes.
//
// Placement (Place) spreads a request's workers over the alive, permitted
// slaves with the most free slots: it keeps the MaxSlaves slaves with the most
// free slots and hands workers out one at a time to whichever of them has the
// most slots left (water-filling, ties by slave ID), so a stage spreads its
// load and leaves the cluster's free slots balanced. OneSlave requests go
// whole onto the slave with the most free slots. A request that does not fit
// the free slots waits in the queue; only a request that could never fit the
// cluster's total slots (Fits is false) is an error, which the master reports
// at submission. Policies skip such requests rather than block on them.
//
// Three policies decide which waiting requests start:
//
//   - sequential: one task at a time in submission order. Only the head
//     request starts, and only when no other task holds slots (the head task's
//     own next stage may start as soon as its previous stage ended). The head
//     waits until its placement fits.
//   - greedy: scan the queue in submission order and start every request that
//     fits in the slots still free; a later small task may overtake a blocked
//     big one, which can starve big tasks.
//   - prioritized: order the queue by effective priority, Priority (clamped to
//     0..100) plus AgingPerSecond times the seconds the stage has waited; ties
//     go in submission order. Start, in that order, every request that fits.
//     Against starvation the scan reserves the cluster for a starved request:
//     when a request that does not fit now (but could fit the cluster) has
//     waited at least ReserveAfter, the scan stops there and no request after
//     it starts in this call, so running stages drain until it fits. Aging
//     lifts a low-priority request above a steady stream of fresh
//     high-priority ones in about (100-Priority)/AgingPerSecond seconds; once
//     it heads the order and has waited ReserveAfter, nothing else starts, so
//     it waits at most until the running stages end. There is no backfilling
//     into the reserved slots: without stage durations the scheduler cannot
//     know a backfilled stage would end in time.
//
// A Schedule call never hands out more slots than a slave has free: each
// policy works on a private copy of the slaves and subtracts as it decides.
//
// Simulate runs a policy over a scripted workload in simulated time (a
// discrete-event simulation) and reports makespan, waits and utilization, as
// FlexPS's scheduling experiment does.
package scheduler
