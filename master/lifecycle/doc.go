// Package lifecycle holds the master's run of one task stage as a pure
// state machine, in the style of etcd-raft: a Stage is fed events (the
// placement was granted and the run begins, a slave acknowledged a control
// request, a worker reported progress, an epoch, its end or its failure, a
// worker arrived at a barrier, the clock ticked, the user cancelled, a
// slave died) through Step, and answers with the actions the caller must
// carry out (send start or stop to a slave, publish a task event, release
// the workers waiting at a barrier, and finally finish the stage with its
// result or its error). A Stage starts no goroutine, does no I/O and never
// reads the wall clock: every timestamp arrives inside an event, so tests
// step it event by event and a fake clock drives progress reports and
// trial deadlines. The master's task goroutine and NATS handlers are a thin
// driver around it: they turn messages and timer ticks into events and
// execute the returned actions outside the lock that guards the Stage.
//
// The phases are Starting (start requests sent, acknowledgements
// outstanding), Running, Stopping (an auto-parallelism trial ran out and
// its workers were told to stop) and Ended. Exactly one StageFinished
// action ends a run; after it, Step returns nothing but the error answer
// to a late barrier arrival. Worker reports are checked before they are
// folded: a non-finite loss or metric fails the stage (ErrNonFinite),
// naming the task, stage, epoch and worker, because a diverging model is
// almost always a learning rate too large and writing its NaN weights
// would only hide that. An epoch whose folded "samples" metric is 0 fails
// the stage too (ErrNoRecords): no worker trained on anything, and the
// model it would write is the untrained one.
//
// A slave's death (SlaveDead) is survived when Config.Survival allows it
// (Survivability: every table replicated, and for a slave running workers,
// a ps stage): the dead slave's ranks are counted out of the stage (the
// done, epoch and barrier counts use the live workers from then on, and
// barrier arrivals are kept per rank, so a barrier the living all reached
// opens at once), and the driver is told to release the dead ranks'
// unconfirmed input blocks to the survivors (ReleaseBlocks, answered by
// BlocksReleased), to count the ranks out of the consistency gates
// (FinishRanks), and followers hear a status.EventFailover. Barrier
// releases then carry the live ranks, so each worker can take its share
// of collective work among the living. A death the stage cannot survive
// fails it with an error that says why and what to set.
package lifecycle
