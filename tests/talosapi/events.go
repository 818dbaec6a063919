package talosapi

import (
	"github.com/google/uuid"
	"github.com/siderolabs/talos/pkg/machinery/api/common"
	"github.com/siderolabs/talos/pkg/machinery/api/machine"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
)

// nodeEvent is one event machined published (talos v1.13.9
// internal/app/machined/pkg/runtime/events.go, EventInfo): its payload
// and the actor (the API call's actor ID) that caused it.
type nodeEvent struct {
	id      string
	actorID string
	payload proto.Message
}

// machineEvent is the event as MachineService.Events sends it
// (EventInfo.ToMachineEvent: the payload as an Any whose type URL is
// "talos/runtime/" and its full name, as machinery's client
// UnmarshalEvent expects).
func (e nodeEvent) machineEvent() (*machine.Event, error) {
	ev := &machine.Event{Id: e.id, ActorId: e.actorID}
	if e.payload == nil {
		return ev, nil
	}
	b, err := proto.Marshal(e.payload)
	if err != nil {
		return nil, err
	}
	ev.Data = &anypb.Any{TypeUrl: "talos/runtime/" + string(e.payload.ProtoReflect().Descriptor().FullName()), Value: b}
	return ev, nil
}

// publishLocked publishes an event of the running boot (c.mu held).
// machined's event buffer lives in memory: a boot starts with none.
func (n *Node) publishLocked(actorID string, payload proto.Message) {
	n.events = append(n.events, nodeEvent{id: uuid.NewString(), actorID: actorID, payload: payload})
	if n.eventsMore != nil {
		close(n.eventsMore)
	}
	n.eventsMore = make(chan struct{})
}

// sequenceFailedLocked publishes what Controller.Run publishes when a
// sequence fails (talos v1.13.9 v1alpha1_controller.go Run and run): the
// sequence's STOP (run's defer), then a NOOP SequenceEvent with the
// error, code FATAL.
func (n *Node) sequenceFailedLocked(actorID, seq, msg string) {
	n.publishLocked(actorID, &machine.SequenceEvent{Sequence: seq, Action: machine.SequenceEvent_STOP})
	n.publishLocked(actorID, &machine.SequenceEvent{
		Sequence: seq, Action: machine.SequenceEvent_NOOP,
		Error: &common.Error{Code: common.Code_FATAL, Message: "sequence failed: " + msg},
	})
}

// Events is Server.Events (talos v1.13.9 v1alpha1_server.go): an empty
// hello event first, then the buffered events tail_events asks for (0:
// none, -1: all of this boot, n: the last n), then each new one as it is
// published, those of with_actor_id only when it is set, until the
// client goes away or the node goes down. tail_id and tail_seconds are
// not modelled.
func (m *machined) Events(in *machine.EventsRequest, srv machine.MachineService_EventsServer) error {
	n := m.n
	if err := srv.Send(&machine.Event{ActorId: in.GetWithActorId()}); err != nil {
		return err
	}
	n.c.mu.Lock()
	next := len(n.events)
	switch t := int(in.GetTailEvents()); {
	case t < 0:
		next = 0
	case t > 0:
		next = max(0, next-t)
	}
	boot := n.bootID
	n.c.mu.Unlock()
	for {
		n.c.mu.Lock()
		if n.bootID != boot {
			n.c.mu.Unlock()
			return nil
		}
		pending := n.events[next:]
		next = len(n.events)
		if n.eventsMore == nil {
			n.eventsMore = make(chan struct{})
		}
		more := n.eventsMore
		n.c.mu.Unlock()
		for _, e := range pending {
			if in.GetWithActorId() != "" && e.actorID != in.GetWithActorId() {
				continue
			}
			me, err := e.machineEvent()
			if err != nil {
				return err
			}
			if err := srv.Send(me); err != nil {
				return err
			}
		}
		select {
		case <-srv.Context().Done():
			return srv.Context().Err()
		case <-more:
		}
	}
}
