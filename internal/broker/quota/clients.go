package quota

// Kafka client quotas (KIP-55): byte rates set for a user, a client id, or
// a user with a client id, each possibly the default one. A request is
// charged to the most specific entity with a rate for its direction, in
// Kafka's order:
//
//	user + client id, user + default client, user,
//	default user + client id, default user + default client, default user,
//	client id, default client id
//
// and the bucket belongs to the actual user and client id the entity names
// (a default user's quota gives each user a bucket of that rate; a user's
// quota is shared by all the user's clients). Client-id entities apply to
// Kafka clients only; an anonymous connection matches no user entity.

// Default names the default user or client id.
const Default = "<default>"

// clientChargeLocked returns the client quota that applies to a user and
// client id for one direction. m.mu is held.
func (m *Manager) clientChargeLocked(user, clientID string, d Direction) (charge, bool) {
	uc := func(u, c string) Entity { return Entity{Kind: KindUserClientID, Name: u, ClientID: c} }
	var order []charge
	if user != "" {
		if clientID != "" {
			order = append(order,
				charge{uc(user, clientID), uc(user, clientID)},
				charge{uc(user, Default), uc(user, clientID)})
		}
		order = append(order, charge{Entity{Kind: KindUser, Name: user}, Entity{Kind: KindUser, Name: user}})
		if clientID != "" {
			order = append(order,
				charge{uc(Default, clientID), uc(user, clientID)},
				charge{uc(Default, Default), uc(user, clientID)})
		}
		order = append(order, charge{Entity{Kind: KindUser, Name: Default}, Entity{Kind: KindUser, Name: user}})
	}
	if clientID != "" {
		c := Entity{Kind: KindClientID, Name: clientID}
		order = append(order, charge{c, c}, charge{Entity{Kind: KindClientID, Name: Default}, c})
	}
	for _, c := range order {
		if m.rate(c.limits, d) > 0 {
			return c, true
		}
	}
	return charge{}, false
}
