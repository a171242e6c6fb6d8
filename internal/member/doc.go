// Package member is a cluster member's runtime: how a node that is one of
// a cluster's members (cluster.members) hosts replicas of the replication
// groups, becomes a group's leader and serves it, hands it over, and
// reaches the other members. It never imports the broker, the front-ends
// or the admin server: internal/serving implements Server, which builds
// what serves a group's clients for one term, and the composition root
// (internal/app) wires the two.
//
// The pieces:
//
//	member        Member: the embedded etcd member, the replication
//	              transport, one Group per replication group, and per
//	              hosted group a term loop and the leader's housekeeping
//	placement     pure rules: a group's voters, its preferred leader, ports
//	directory     the metadata's view: members, published leaders, group
//	              memberships, each followed with a watch
//	peer          typed calls between members, one method and error table
//	relay         client connections relayed to a group's leader, and
//	              moved with their unanswered requests when it changes
//	image         a leader's engine image fetched by a replica behind it
//
// A hosted group's term loop follows its replica's role
// (replication.Group.RoleChanged, no polling):
//
//	          appends open (Writable)
//	follower ───────────────────────────▶ waiting for the term's commit
//	   ▲                                     │ every record held committed
//	   │                                     ▼
//	   │  leadership ends, or     Server.Serve: broker built from the log,
//	   └──────────────────────── serving     front-ends take the listeners
//	     a later term (Serving.End)  │  ▲
//	                                 ▼  │ appends open again
//	                       appends held (a hand-off or a membership
//	                       change under way): still serving
//
// Beside it, while the replica leads, tendGroup publishes the member as
// the group's leader, keeps the group's Raft membership as the placement
// says, hands the group to its preferred member and steps down when the
// disk guard refuses writes. hosting starts a replica when the placement
// comes to name this member and drops one its group's leader removed; a
// replica that fetched an image restarts in place (group 0's, whose engine
// is the node's, restarts the process). On a stop the member hands every
// group it leads to a caught-up replica (HandOff).
//
// Time is read through Clock, so the loops can be tested without sleeping.
package member
