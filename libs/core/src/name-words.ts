// Word lists for generated sandbox names (names.ts). Written for sandgate: lowercase ASCII, each
// adjective at most 10 letters and each noun at most 8, so `adjective-noun` is at most 19 bytes
// and never needs the cut. names.test.ts checks these properties.

export const ADJECTIVES: readonly string[] = `
able acid agile airy alert alive amber ample amused ancient angular apt arctic ardent aromatic
artful ashen astute atomic august autumn avid awake azure balmy bashful basic bold bonny bouncy
brainy brave breezy brief bright brisk bronze bubbly busy calm candid canny careful casual
cheery chief chilly civic civil classic clean clear clever cloudy coastal cobalt cold comic
cool copper coral cosmic cosy crafty crimson crisp curious curly cyan daily dainty dapper daring
dashing dawn dear decent deep deft dense direct distant divine dizzy docile dreamy dry dusty
dutiful eager early earthy easy elated elder elegant emerald epic equal even exact expert fabled
fair faithful famous fancy fast fearless feisty fervent festive fierce fine firm fit flat fleet
floral fluent flying fond formal frank free fresh friendly frosty frugal funny fuzzy gallant
gentle genuine giant gifted giddy gilded glad gleaming global glossy golden good graceful grand
grateful green grey happy hardy harmonic hasty hazel hearty helpful heroic hidden honest hopeful
humble icy ideal idle indigo inner ivory jade jaunty jolly jovial joyful juicy just keen kind
kindly known large late lavish lawful lean legal lemon level light likely limber linear lively
local lofty loyal lucid lucky lunar lush magic major mellow merry mighty mild minty misty modern
modest mossy muddy mutual narrow native neat nimble noble north novel oaken olive open optimal
orange orderly oval pale patient peaceful pearly perfect placid plain playful pleasant plucky
plush polar polite polished precise prime proper proud prudent pure quaint quick quiet radiant
rapid rare ready regal relaxed robust rosy round royal ruby rugged rustic sacred safe sage salty
sandy scarlet secret serene sharp shiny silent silky silver simple sincere sleek slim smart smooth
snowy social solar solid sonic sound spare sparkly speedy spicy splendid spry square stable
stark steady steep stellar still stoic stormy sturdy subtle sunny super supreme sweet swift tame
tawny tender thankful tidal tidy timely tiny topaz tranquil trusty tulip twilight unique upbeat
urban useful valid valiant velvet verdant vibrant violet vital vivid warm wavy wealthy wide wild
windy wintry wise witty wooden woolly worthy young zany zealous zen zesty
`.trim().split(/\s+/);

export const NOUNS: readonly string[] = `
acorn adder agate alder alpaca anchor angler antler apple apricot arch arrow aspen aster atlas
auk aurora badger bamboo banjo barley basil basin bat beacon beagle bear beaver beech beetle bell
birch bison bittern bloom boar bobcat bonsai bramble brook buffalo bunting cactus camel canary
canoe canyon caper cardinal caribou carp cedar cello cheetah cherry cicada cinder clam clover
cobra comet condor coral cougar cove coyote crab crane cricket crow cypress dahlia daisy delta
dingo dolphin dove dragon drake dune eagle egret elk elm ember emu falcon fennel fern ferret
finch fir firefly fjord flame flint fox frog gazelle gecko geyser ginkgo glacier goose gorilla
grape grouse gull hare harbor hawk hazel heron hickory hippo holly hornet husky ibex ibis iguana
impala iris island ivy jackal jaguar jay juniper kelp kestrel kite kiwi koala lagoon lark laurel
lemming lemur leopard lily linden lion lizard llama lobster locust lotus lynx magpie mallard
mango mantis maple marlin marmot marten meadow mesa mink minnow mole moose moth mussel narwhal
nebula newt nutmeg oak oasis ocelot octopus olive orca orchid osprey otter owl oyster panda
panther parrot peach pebble pelican pepper petrel pigeon pike pine plover plum pollen poppy
prairie puffin puma quail quartz quokka rabbit raccoon raven reef reindeer ridge river robin
rook rowan sable saffron salmon sequoia shark shrew sierra skunk sloth snail sparrow spruce squid
starling stoat stork summit swallow swan swift tapir teal tern thistle thrush tiger toad topaz
toucan trout tulip tundra turtle valley viper vole walnut walrus wasp weasel whale willow wolf
wombat wren yak yarrow zebra
`.trim().split(/\s+/);
